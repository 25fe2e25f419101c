"""Seed 002, before a reply leaves: the language it is written in, the link check, footers."""

from __future__ import annotations

from typing import Any

from tests.scenarios.lifecycle_support import calls, lifecycle_agent, message, said

PERSONA = "Atendente da Loja Azul. Trocas: https://www.lojaazul.com.br/trocas"
KNOWLEDGE = [
    {"id": "garantia", "title": "Garantia", "url": "https://ajuda.lojaazul.com.br/garantia",
     "text": "A garantia é de 12 meses."},
    {"id": "faq-loja", "title": "Onde fica a loja?", "type": "faq", "source": "faq",
     "text": "A garantia cobre defeitos de fábrica."},
]


async def test_language_fixed_is_passed_to_the_speak_prompt() -> None:
    """fixed: the base language, whatever the customer writes."""
    settings = {"language": {"strategy": "fixed", "base_language": "pt",
                             "response_language": "es"}}
    agent, provider = lifecycle_agent([said("Olá")], settings)
    await agent.turn(message("Hello, where is my order please?", "m1"))
    request = provider.calls[0]
    assert request.meta["language"] == "pt"
    assert "## Language\nWrite your reply in the language with code 'pt'." in request.system
    assert request.system.rindex("## Language") < request.system.rindex("## Response format")


async def test_response_language_comes_second() -> None:
    """Not fixed, response_language set: that language."""
    settings = {"language": {"base_language": "pt", "response_language": "es"}}
    agent, provider = lifecycle_agent([said("Hola")], settings)
    await agent.turn(message("Hello, where is my order please?", "m1"))
    assert provider.calls[0].meta["language"] == "es"


async def test_otherwise_the_latest_message_decides_and_is_remembered() -> None:
    """Auto: each message's language; a message too short to tell keeps the last one."""
    settings = {"language": {"base_language": "pt"}}
    agent, provider = lifecycle_agent([said("Hi"), said("Sure")], settings)
    first = await agent.turn(message("Hello, I would like to know where my order is", "m1"))
    await agent.turn(message("ok", "m2", first))
    assert [c.meta["language"] for c in provider.calls] == ["en", "en"]
    assert first.session.metadata["lifecycle"]["language"] == "en"


async def test_without_language_settings_the_prompt_has_no_language_block() -> None:
    """Language is opt-in: no setting, no block."""
    agent, provider = lifecycle_agent([said("Olá")], {"link_check": True})
    await agent.turn(message("Hello there, how are you today?", "m1"))
    assert "## Language" not in provider.calls[0].system
    assert "language" not in provider.calls[0].meta


async def test_the_link_check_repairs_and_removes_and_reports_every_change() -> None:
    """An own-domain typo is repaired, an invented own link removed, others untouched."""
    text = ("Troque em https://www.lojaazul.com.br/troca. Veja também https://lojaazul.com.br/"
            "promo-secreta. Mais em https://www.google.com/search.")
    agent, _ = lifecycle_agent([said(text)], {"link_check": True}, persona=PERSONA)
    result = await agent.turn(message("como troco?", "m1"))
    assert result.messages[0].text == (
        "Troque em https://www.lojaazul.com.br/trocas. Mais em https://www.google.com/search.")
    assert [(f.action, f.url, f.replacement) for f in result.link_fixes] == [
        ("repaired", "https://www.lojaazul.com.br/troca", "https://www.lojaazul.com.br/trocas"),
        ("removed", "https://lojaazul.com.br/promo-secreta", None),
    ]


async def test_urls_of_documents_found_this_turn_are_known() -> None:
    """A knowledge URL the search returned is kept word for word."""
    text = "Detalhes: https://ajuda.lojaazul.com.br/garantia"
    script = [calls(("search_knowledge", {"query": "garantia"})), said(text)]
    settings = {"link_check": True, "tools": {"search_knowledge": True}, "knowledge": KNOWLEDGE}
    agent, _ = lifecycle_agent(script, settings)
    result = await agent.turn(message("e a garantia?", "m1"))
    assert result.messages[0].text.startswith(text) and result.link_fixes == []


async def test_without_the_link_check_links_leave_as_written() -> None:
    """link_check off: even an invented own link is sent as is."""
    text = "Veja https://lojaazul.com.br/inventado agora mesmo."
    agent, _ = lifecycle_agent([said(text)], {}, persona=PERSONA)
    result = await agent.turn(message("oi", "m1"))
    assert result.messages[0].text == text and result.link_fixes == []


async def _footer(mode: str | None, params: dict[str, str] | None = None) -> Any:
    script = [calls(("search_knowledge", {"query": "garantia"})), said("A garantia é de 12 meses.")]
    settings: dict[str, Any] = {"tools": {"search_knowledge": True}, "knowledge": KNOWLEDGE,
                                "sources_footer": mode, "language": {"strategy": "fixed",
                                                                     "base_language": "pt"}}
    if params:
        settings["source_link_params"] = params
    agent, _ = lifecycle_agent(script, settings)
    return await agent.turn(message("garantia?", "m1"))


async def test_urls_only_footer_lists_the_pages_used() -> None:
    """urls_only: one line per knowledge page with a link, with the link params."""
    result = await _footer("urls_only", {"utm_source": "agente"})
    assert result.messages[0].text == (
        "A garantia é de 12 meses.\n\nFontes:\n"
        "- Garantia: https://ajuda.lojaazul.com.br/garantia?utm_source=agente")


async def test_urls_and_kb_footer_adds_a_knowledge_base_line() -> None:
    """urls_and_kb: also one generic line for FAQ entries and pages without a link."""
    result = await _footer("urls_and_kb")
    assert result.messages[0].text.endswith(
        "- Garantia: https://ajuda.lojaazul.com.br/garantia\n- Base de conhecimento")


async def test_no_footer_unless_asked() -> None:
    """sources_footer unset: the reply is the model's text alone, provenance still attached."""
    result = await _footer(None)
    assert result.messages[0].text == "A garantia é de 12 meses."
    assert {s.document_id for s in result.messages[0].provenance} == {"garantia", "faq-loja"}

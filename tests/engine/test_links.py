"""The link check: own-domain links kept, repaired or removed; other links untouched."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.lifecycle.links import KnownLinks, LinkFix, check_links

PERSONA = "Atendente da Loja. Trocas em https://www.loja.com.br/trocas e suporte@loja.com.br."
INSTRUCTIONS = "Preços: https://loja.com.br/precos?plano=anual"


def known() -> KnownLinks:
    return KnownLinks.from_texts(
        [PERSONA, INSTRUCTIONS], urls=["https://docs.loja.com.br/garantia"], domains=["ajuda.io"]
    )


def test_sources_give_urls_and_own_hosts() -> None:
    """URLs and e-mail domains in the texts, knowledge URLs and extra domains are all ours."""
    links = known()
    assert links.urls == [
        "https://www.loja.com.br/trocas",
        "https://loja.com.br/precos?plano=anual",
        "https://docs.loja.com.br/garantia",
    ]
    assert links.hosts == {"loja.com.br", "docs.loja.com.br", "ajuda.io"}


@pytest.mark.parametrize(
    "text",
    [
        "Faça a troca em https://www.loja.com.br/trocas.",
        "Veja https://loja.com.br/precos?plano=anual agora",
        "A garantia: https://docs.loja.com.br/garantia",
        "Sem www também vale: https://loja.com.br/trocas/",
    ],
)
def test_a_link_quoted_word_for_word_is_kept(text: str) -> None:
    """A known URL (trailing punctuation, 'www.' and a final '/' aside) leaves as it is."""
    result = check_links(text, known())
    assert result.text == text and result.fixes == []


@pytest.mark.parametrize("url", ["https://loja.com.br", "https://www.loja.com.br/", "https://ajuda.io"])
def test_the_home_page_of_a_known_host_is_kept(url: str) -> None:
    """The home page of an own host is kept even if no source quotes it."""
    result = check_links(f"Visite {url} quando quiser.", known())
    assert result.fixes == [] and url in result.text


def test_a_typo_in_the_path_is_repaired() -> None:
    """A near miss of a known URL is replaced by the known URL and reported."""
    result = check_links("Troque em https://www.loja.com.br/troca hoje.", known())
    assert result.text == "Troque em https://www.loja.com.br/trocas hoje."
    assert result.fixes == [
        LinkFix("repaired", "https://www.loja.com.br/troca", "https://www.loja.com.br/trocas")
    ]


def test_a_typo_in_the_host_is_repaired() -> None:
    """A host one letter off an own domain is still ours, and its near miss is repaired."""
    result = check_links("Garantia: https://docs.lojja.com.br/garantia", known())
    assert result.text == "Garantia: https://docs.loja.com.br/garantia"
    assert [f.action for f in result.fixes] == ["repaired"]


def test_an_unknown_link_on_an_own_domain_is_removed_and_the_sentence_tidied() -> None:
    """A made-up own-domain link goes, with the words that only led to it."""
    text = "Você pode ver em https://loja.com.br/inventado ou falar conosco."
    result = check_links(text, known())
    assert result.text == "Você pode ver ou falar conosco."
    assert result.fixes == [LinkFix("removed", "https://loja.com.br/inventado")]


def test_a_sentence_left_with_nothing_to_say_is_dropped() -> None:
    """'See it at: <link>.' goes whole; the sentences around it stay."""
    text = "Obrigado pelo contato. Veja em: https://loja.com.br/novidades. Até logo!"
    assert check_links(text, known()).text == "Obrigado pelo contato. Até logo!"


def test_a_removed_markdown_link_keeps_its_label() -> None:
    """[label](bad own link) becomes the label; a repaired one keeps the markdown."""
    result = check_links("Leia [a política](https://loja.com.br/politica) antes.", known())
    assert result.text == "Leia a política antes."
    repaired = check_links("Leia [trocas](https://loja.com.br/trocass).", known())
    assert repaired.text == "Leia [trocas](https://www.loja.com.br/trocas)."


def test_empty_brackets_left_by_a_removal_go_too() -> None:
    """'(link)' leaves no '()' behind."""
    text = "Nosso blog (https://loja.com.br/blog) tem dicas de uso."
    assert check_links(text, known()).text == "Nosso blog tem dicas de uso."


def test_line_breaks_between_sentences_survive_a_removal() -> None:
    """A removed line goes; the lines around it keep their breaks."""
    text = "Olá!\nAcesse https://loja.com.br/x\nAbraço da equipe"
    assert check_links(text, known()).text == "Olá!\nAbraço da equipe"


@pytest.mark.parametrize(
    "text",
    [
        "Veja https://google.com/search?q=loja",
        "Leia https://lojas-americanas.com.br/x",
        "www.example.org",
    ],
)
def test_links_to_other_websites_are_untouched(text: str) -> None:
    """A host that is neither ours nor a typo of ours is never changed."""
    result = check_links(text, known())
    assert result.text == text and result.fixes == []


def test_an_agent_with_no_own_domains_changes_nothing() -> None:
    """Without sources naming any host there is nothing to check."""
    text = "Veja https://loja.com.br/qualquer"
    assert check_links(text, KnownLinks()).text == text


def test_every_change_is_reported_in_order() -> None:
    """Several links: each repair and removal is one fix, in the order they appear."""
    text = "Trocas: https://loja.com.br/trocass. Blog: https://loja.com.br/blog. Fim do recado."
    result = check_links(text, known())
    assert [(f.action, f.url) for f in result.fixes] == [
        ("repaired", "https://loja.com.br/trocass"),
        ("removed", "https://loja.com.br/blog"),
    ]


def test_the_check_never_raises() -> None:
    """A broken source list leaves the reply as it was instead of failing the turn."""
    broken = KnownLinks(urls=[None], hosts={"loja.com.br"})  # type: ignore[list-item]  # on purpose
    text = "Veja https://loja.com.br/x"
    assert check_links(text, broken).text == text


_WORDS = st.sampled_from(["Olá", "veja", "em", "o", "pedido", "agora.", "obrigado!", "\n"])
_PATHS = st.text(alphabet="abcdefghij/-", min_size=0, max_size=12)


@given(
    words=st.lists(_WORDS, max_size=12),
    paths=st.lists(_PATHS, min_size=1, max_size=3),
    foreign=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_property_removed_links_never_leave_and_foreign_links_never_change(
    words: list[str], paths: list[str], foreign: bool
) -> None:
    """For any reply: a removed link is gone from the text, a repaired one points at a known
    URL, and a reply whose links are all foreign comes back unchanged."""
    host = "www.example.org" if foreign else "loja.com.br"
    links = [f"https://{host}/{p}" for p in paths]
    text = " ".join(words + links)
    result = check_links(text, known())
    for fix in result.fixes:
        if fix.action == "removed":
            assert fix.url not in result.text.split()
        else:
            assert fix.replacement in known().urls or fix.replacement.endswith("/")
    if foreign:
        assert result.text == text and result.fixes == []

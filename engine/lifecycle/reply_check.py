"""What happens to a spoken reply before it leaves: the link check, then the sources footer.

The agent's own links are the URLs, e-mail domains and host names written in its persona, goal,
knowledge, instructions (agent, flow and step), step prompts and loaded skills, plus the URLs
of the knowledge documents and web pages this turn's searches found, the web search source's
``allowed_domains`` and ``link_domains``. Every change is kept for ``TurnResult.link_fixes``.
The web search footer (top 3 links, "+X more sources") follows whenever the reply used web
search. The footer (``sources_footer``) lists the documents found
this turn: ``urls_only`` their links (with ``source_link_params``), ``urls_and_kb`` also one
"Knowledge Base" line for FAQ entries and documents without a link. Fixed questions and
verbatim texts are the agent's own words and are not checked.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from engine.config import TalkStep
from engine.lifecycle import skills, web_search
from engine.lifecycle import turn as lifecycle_turn
from engine.lifecycle.links import KnownLinks, check_links
from engine.lifecycle.results import LinkFixReport

if TYPE_CHECKING:
    from engine.lifecycle.turn import LifecycleTurn
    from engine.state import SpeakReply, TurnState

FOOTER_TITLES = {"pt": "Fontes", "es": "Fuentes", "fr": "Sources", "de": "Quellen", "en": "Sources"}
KB_LINE = {"pt": "Base de conhecimento", "es": "Base de conocimiento", "en": "Knowledge Base"}


def own_links(state: TurnState, turn: LifecycleTurn) -> KnownLinks:
    """Everything the agent may quote, and its own hosts."""
    config = state.config
    texts = [config.persona or "", config.goal or "", *config.knowledge]
    texts += [i.text() for i in config.instructions]
    for flow in config.flows:
        texts += [i.text() for i in flow.instructions]
        for step in flow.steps:
            if isinstance(step, TalkStep):
                texts.append(step.prompt or "")
                texts += [str(v) for item in step.instructions for v in item.values()]
    texts += skills.texts(turn)
    urls = [hit.url for hit in turn.found if hit.url] + [page.url for page in turn.web_found]
    domains = list(turn.settings.link_domains)
    if turn.settings.web_search is not None:
        domains += turn.settings.web_search.allowed_domains
    return KnownLinks.from_texts(texts, urls=urls, domains=domains)


def checked(state: TurnState, turn: LifecycleTurn, text: str) -> str:
    """``text`` after the link check, every change reported; "" when nothing is left."""
    result = check_links(text, own_links(state, turn))
    removed = [fix.url for fix in result.fixes if fix.action == "removed"]
    for fix in result.fixes:
        turn.link_fixes.append(
            LinkFixReport(action=fix.action, url=fix.url, replacement=fix.replacement)
        )
    return without(result.text, removed).strip()


def polish(state: TurnState) -> None:
    """Speak, after the call: check the reply's links and add the footers. The words the model
    gave with a ``handoff`` call go with the hand-off: they are checked too."""
    turn = lifecycle_turn.of(state)
    reply = state.reply
    if turn is not None and turn.handoff_requested is not None:
        if turn.partial_text and turn.settings.link_check:
            turn.partial_text = checked(state, turn, turn.partial_text) or None
        return
    if turn is None or reply is None or reply.text is None or reply.skipped:
        return
    if state.speaker is not None and state.speaker.question is not None:
        return
    if turn.settings.link_check:
        text = checked(state, turn, reply.text)
        if not text:
            _nothing_left(turn, reply)
            return
        reply.text = text
    footer = sources_footer(turn)
    if footer:
        reply.text = f"{reply.text}\n\n{footer}"
    web = web_search.footer(turn.web_found) if not turn.fallback else None
    if web:  # always, when the reply used web search; it cannot be turned off
        reply.text = f"{reply.text}\n\n{web}"


EMPTY_AFTER_CHECK = "empty message after the link check"
# Where a link ends: trailing punctuation, then a character no link holds (or the end).
_LINK_END = r"(?=[.,;:!?]*(?:[\s<>\"'`\]\[(){}]|$))"


def without(text: str, removed: list[str]) -> str:
    """``text`` with no whole occurrence of a removed link left (a longer link that merely starts
    with one is not touched): what the check reports as removed is never sent."""
    for url in sorted(set(removed), key=len, reverse=True):
        text = re.sub(re.escape(url) + _LINK_END, "", text)
    return text


def _nothing_left(turn: LifecycleTurn, reply: SpeakReply) -> None:
    """The reply was only links the check removed: the fallback message, else the retry path."""
    fallback = turn.settings.fallback_message
    if fallback is not None:
        reply.text = fallback
        reply.values.clear()
        turn.fallback = True
        return
    reply.text, reply.deferred, reply.error = None, "retryable", EMPTY_AFTER_CHECK


def sources_footer(turn: LifecycleTurn) -> str | None:
    """The footer for this turn's sources, or None when off or nothing was used."""
    mode = turn.settings.sources_footer
    if mode is None or turn.fallback or not turn.found:
        return None
    language = (turn.language.code if turn.language else None) or "en"
    lines: list[str] = []
    seen: set[str] = set()
    generic = False
    for source in turn.sources():
        if source.type == "web":
            continue  # web pages have their own footer
        if source.url and source.type == "kb":
            url = with_params(source.url, turn.settings.source_link_params)
            if url not in seen:
                seen.add(url)
                lines.append(f"- {source.title}: {url}")
        else:
            generic = True
    if mode == "urls_and_kb" and generic:
        lines.append(f"- {KB_LINE.get(language, KB_LINE['en'])}")
    if not lines:
        return None
    return f"{FOOTER_TITLES.get(language, FOOTER_TITLES['en'])}:\n" + "\n".join(lines)


def with_params(url: str, params: dict[str, str]) -> str:
    """``url`` with ``params`` added to its query (existing keys are left as they are)."""
    if not params:
        return url
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    for key, value in params.items():
        query.setdefault(key, value)
    return urlunsplit(parts._replace(query=urlencode(query)))

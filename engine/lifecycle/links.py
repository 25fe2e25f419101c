"""The link check: links on the agent's own domains are verified before a reply leaves.

Own domains are the hosts of the URLs and e-mail addresses, and the host names written plainly
("lojaverde.com.br"), in the agent's persona, instructions, knowledge and loaded skills; the
URLs of knowledge documents found this turn; the web search source's allowed domains; and any
domain the settings add. For each link in the reply on one of those domains (or on a host one typo
away from one):

- it appears word for word in those sources, or is the home page of a known host: kept;
- it is a near miss of a known URL (a typo in the host or the path): replaced (repaired);
- otherwise: removed, and the sentence is tidied (removed).

Links to other websites are left alone. Every change is reported as a ``LinkFix``. The check
never blocks a reply: any failure inside it returns the text unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

_URL = re.compile(r"(?:https?://|www\.)[^\s<>\"'`\]\[(){}]+", re.IGNORECASE)
_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+)")
# A host name written plainly ("lojaverde.com.br"): labels of letters, digits and hyphens and a
# final label of letters, not inside a URL, a path or an e-mail address.
_HOST = re.compile(
    r"(?<![\w@./:\-])((?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+[a-z]{2,24})(?![\w\-]|\.\w|@)",
    re.IGNORECASE,
)
_FILE_ENDINGS = frozenset(
    "pdf png jpg jpeg gif webp svg txt csv doc docx xls xlsx ppt pptx zip html htm php js json "
    "xml md py".split()
)
_TRAILING = ".,;:!?"
_MARKDOWN = re.compile(r"\[([^\]]*)\]\(\s*([^)\s]+)\s*\)")
HOST_TYPOS = 2  # a host at most this many edits from an own domain is treated as ours


@dataclass(frozen=True)
class LinkFix:
    """One change the link check made: ``repaired`` (with the URL put instead) or ``removed``."""

    action: Literal["repaired", "removed"]
    url: str
    replacement: str | None = None


@dataclass
class KnownLinks:
    """The URLs the agent may quote and the hosts that count as its own."""

    urls: list[str] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)

    @classmethod
    def from_texts(cls, texts: Iterable[str], *, urls: Iterable[str] = (),
                   domains: Iterable[str] = ()) -> KnownLinks:
        """Collect URLs and e-mail domains from free text, plus listed URLs and domains."""
        known = cls()
        for text in texts:
            for match in _URL.finditer(text or ""):
                known.add_url(_strip_trailing(match.group(0)))
            for match in _EMAIL.finditer(text or ""):
                known.hosts.add(_bare_host(match.group(1)))
            for match in _HOST.finditer(text or ""):
                if match.group(1).rsplit(".", 1)[-1].lower() not in _FILE_ENDINGS:
                    known.hosts.add(_bare_host(match.group(1)))
        for url in urls:
            known.add_url(url)
        for domain in domains:
            known.hosts.add(_bare_host(domain))
        return known

    def add_url(self, url: str) -> None:
        if url and url not in self.urls:
            self.urls.append(url)
        host = _host(url)
        if host:
            self.hosts.add(host)


@dataclass
class LinkCheckResult:
    """The text as it leaves, and what changed."""

    text: str
    fixes: list[LinkFix] = field(default_factory=list)


def check_links(text: str, known: KnownLinks) -> LinkCheckResult:
    """Keep, repair or remove every own-domain link in ``text``; never raises."""
    try:
        return _check(text, known)
    except Exception:  # the check must never block a reply
        return LinkCheckResult(text)


def _check(text: str, known: KnownLinks) -> LinkCheckResult:
    if not known.hosts:
        return LinkCheckResult(text)
    fixes: list[LinkFix] = []
    verdicts: dict[str, tuple[str, str | None]] = {}

    def judge(url: str) -> tuple[str, str | None]:
        if url not in verdicts:  # a reply often repeats a link; judge each once
            verdicts[url] = _judge(url, known)
        return verdicts[url]

    text = _MARKDOWN.sub(lambda m: _markdown(m, judge, fixes), text)
    out: list[str] = []
    last = 0
    for match in _URL.finditer(text):
        url = _strip_trailing(match.group(0))
        end = match.start() + len(url)
        verdict, replacement = judge(url)
        out.append(text[last : match.start()])
        if verdict in ("keep", "other"):
            out.append(url)
        elif verdict == "repair":
            assert replacement is not None
            out.append(replacement)
            fixes.append(LinkFix("repaired", url, replacement))
        else:
            out.append("\x00")  # where the link was; the sentence is tidied below
            fixes.append(LinkFix("removed", url))
        last = end
    out.append(text[last:])
    result = "".join(out)
    if "\x00" in result:
        result = _tidy(result)
    return LinkCheckResult(result, fixes)


def _markdown(
    match: re.Match[str], judge: Callable[[str], tuple[str, str | None]], fixes: list[LinkFix]
) -> str:
    label, url = match.group(1), match.group(2)
    verdict, replacement = judge(url)
    if verdict in ("keep", "other"):
        return match.group(0)
    if verdict == "repair":
        fixes.append(LinkFix("repaired", url, replacement))
        return f"[{label}]({replacement})"
    fixes.append(LinkFix("removed", url))
    return label


def _judge(url: str, known: KnownLinks) -> tuple[Literal["keep", "repair", "remove", "other"],
                                                  str | None]:
    host = _host(url)
    if not host:
        return "other", None
    own = host in known.hosts
    near_host = None if own else _nearest(host, known.hosts, HOST_TYPOS)
    if not own and near_host is None:
        return "other", None
    if url in known.urls:
        return "keep", None
    norm = _normal(url)
    for candidate in known.urls:
        if _normal(candidate) == norm:
            return "keep", None
    if own and _is_home(url):
        return "keep", None
    best = _nearest_url(norm, known.urls)
    if best is not None:
        return "repair", best
    if near_host is not None and _is_home(url):
        return "repair", f"https://{near_host}/"
    return "remove", None


def _nearest_url(norm: str, urls: list[str]) -> str | None:
    best: tuple[int, str] | None = None
    for candidate in urls:
        target = _normal(candidate)
        limit = max(2, len(target) // 10)
        distance = _distance(norm, target, limit)
        if distance <= limit and (best is None or distance < best[0]):
            best = (distance, candidate)
    return best[1] if best else None


def _nearest(host: str, hosts: Iterable[str], limit: int) -> str | None:
    best: tuple[int, str] | None = None
    for candidate in sorted(hosts):
        distance = _distance(host, candidate, limit)
        if distance <= limit and (best is None or distance < best[0]):
            best = (distance, candidate)
    return best[1] if best else None


def _distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance within ``limit`` (anything larger is ``limit + 1``).

    Only the diagonal band ``|i - j| <= limit`` is computed, so a comparison costs
    O(len * limit) rather than O(len^2): links are checked on every reply.
    """
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    if a == b:
        return 0
    over = limit + 1
    previous = [j if j <= limit else over for j in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        low, high = max(1, i - limit), min(len(b), i + limit)
        current = [over] * (len(b) + 1)
        current[0] = i if i <= limit else over
        best = current[0]
        for j in range(low, high + 1):
            cost = previous[j - 1] + (a[i - 1] != b[j - 1])
            value = min(cost, previous[j] + 1, current[j - 1] + 1, over)
            current[j] = value
            best = min(best, value)
        if best > limit:
            return over
        previous = current
    return min(previous[len(b)], over)


def _strip_trailing(url: str) -> str:
    while url and url[-1] in _TRAILING:
        url = url[:-1]
    return url


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url if "://" in url else f"https://{url}")
    path = parts.path or ""
    if parts.query:
        path += f"?{parts.query}"
    if parts.fragment:
        path += f"#{parts.fragment}"
    return _bare_host(parts.hostname or ""), path


def _host(url: str) -> str:
    return _split(url)[0]


def _bare_host(host: str) -> str:
    host = host.lower().strip().rstrip(".")
    return host[4:] if host.startswith("www.") else host


def _normal(url: str) -> str:
    host, path = _split(url)
    return f"{host}{path.rstrip('/')}"


def _is_home(url: str) -> bool:
    return _split(url)[1] in ("", "/")


_EMPTY_BRACKETS = re.compile(r"[(<\[]\s*\x00\s*[)>\]]")
# Words that only lead to a link ("see it at <link>"); they go with it.
_LEAD_WORDS = (
    "at|on|in|via|here|visit|em|no|na|pelo|pela|aqui|acesse|en|aquí|sur|ici|unter|bei|hier"
)
_LEAD_IN = re.compile(
    rf"(?:[ \t]+(?:{_LEAD_WORDS}))?[ \t]*[:\-\u2013\u2014]?[ \t]*\x00", re.IGNORECASE
)
_SENTENCES = re.compile(r"((?<=[.!?])[ \t]+|\n+)")
MIN_SENTENCE_WORDS = 3  # a sentence left shorter than this was only there for the link


def _tidy(text: str) -> str:
    """Remove the holes left by removed links, the words that led to them, and a sentence
    that has nothing left to say. Line breaks between sentences are kept."""
    parts = _SENTENCES.split(_EMPTY_BRACKETS.sub("\x00", text))
    out: list[str] = []
    for index, part in enumerate(parts):
        if index % 2:  # a separator: kept when the sentence before it was kept
            if out and not out[-1].endswith(("\n", " ")):
                out.append(part)
            continue
        if "\x00" in part:
            part = _LEAD_IN.sub("", part).replace("\x00", "")
            part = re.sub(r"[ \t]+([.,;!?])", r"\1", part)
            part = re.sub(r"([.,;!?])[.,;]+", r"\1", part)
            part = re.sub(r"[ \t]{2,}", " ", part).strip()
            if len(re.findall(r"\w+", part)) < MIN_SENTENCE_WORDS:
                continue
        if part:
            out.append(part)
    tidied = "".join(out).strip()
    if tidied:
        return tidied
    # Every sentence was about removed links: keep what is left once the links are out, when
    # that still says something; otherwise nothing is left (the caller decides what to send).
    left = re.sub(r"[ \t]{2,}", " ", _LEAD_IN.sub("", text).replace("\x00", "")).strip()
    return left if len(re.findall(r"\w+", left)) >= MIN_SENTENCE_WORDS else ""

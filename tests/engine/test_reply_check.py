"""The sources footer's links: the configured parameters are added, the page's own kept."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.lifecycle.links import KnownLinks, check_links
from engine.lifecycle.reply_check import with_params, without


def test_link_params_are_added_to_the_query() -> None:
    """utm parameters go after the page's own query."""
    assert with_params("https://a.com/p?x=1", {"utm_source": "agente"}) == (
        "https://a.com/p?x=1&utm_source=agente")


def test_a_parameter_the_link_already_has_is_left_as_it_is() -> None:
    """The page's own value wins over the configured one."""
    assert with_params("https://a.com/p?utm_source=site", {"utm_source": "agente"}) == (
        "https://a.com/p?utm_source=site")


def test_no_params_leaves_the_link_untouched() -> None:
    """An empty mapping returns the URL byte for byte."""
    assert with_params("https://a.com/p?b=2&a=1#top", {}) == "https://a.com/p?b=2&a=1#top"


_PIECES = st.sampled_from([
    "Olá", "veja", "em", "acesse:", "agora.", "(", ")", "[aqui](", "\n", "obrigado!",
    "https://lojaverde.com.br/trocas", "https://lojaverde.com.br/inventado",
    "https://lojaverde.com.br/trocas-x", "https://www.lojaverde.com.br", "https://outra.org/a",
    "lojaverde.com.br", "https://lojaverde.com.br/inventado.",
])


@given(pieces=st.lists(_PIECES, max_size=16), noise=st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_property_a_removed_link_is_never_in_the_text_sent(pieces: list[str], noise: str) -> None:
    """For any reply (arbitrary unicode around own and other links), no link the check reports
    as removed is left whole in the text that is sent, and the check never raises."""
    known = KnownLinks.from_texts(["Somos lojaverde.com.br. Trocas: https://lojaverde.com.br/trocas"])
    text = " ".join([*pieces, noise])
    checked = check_links(text, known)
    removed = [f.url for f in checked.fixes if f.action == "removed"]
    sent = without(checked.text, removed)
    for match in re.finditer(r"(?:https?://|www\.)[^\s<>\"'`\]\[(){}]+", sent):
        assert match.group(0).rstrip(".,;:!?") not in removed


@given(text=st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_property_own_hosts_come_from_any_text_without_raising(text: str) -> None:
    """Arbitrary persona text gives a set of lower-case host names, never an error."""
    hosts = KnownLinks.from_texts([text]).hosts
    assert all(h == h.lower() and "." in h for h in hosts)

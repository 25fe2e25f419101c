"""The sources footer's links: the configured parameters are added, the page's own kept."""

from __future__ import annotations

from engine.lifecycle.reply_check import with_params


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

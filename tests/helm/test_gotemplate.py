"""The Go-template subset renderer follows Go's text/template on what the chart uses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.gotemplate import TemplateError, TemplateSet


def render(source: str, dot: Any = None, **defines: str) -> str:
    templates = TemplateSet()
    for name, text in defines.items():
        templates.add(name, text)
    templates.add("main", source)
    return templates.render("main", dot if dot is not None else {})


def test_trim_markers_eat_whitespace_on_their_side_only() -> None:
    """`{{-` trims all whitespace before the action, `-}}` all whitespace after it."""
    assert render("a  \n {{- 1 }} \n b") == "a1 \n b"
    assert render("a {{ 1 -}} \n\n b") == "a 1b"


def test_if_else_if_else() -> None:
    """else-if chains pick the first true branch; Go truth makes 0, "" and {} false."""
    source = "{{ if .a }}A{{ else if .b }}B{{ else }}C{{ end }}"
    assert render(source, {"a": 1, "b": 1}) == "A"
    assert render(source, {"a": 0, "b": "x"}) == "B"
    assert render(source, {"a": "", "b": {}}) == "C"


def test_range_over_a_map_is_in_key_order_with_variables() -> None:
    """range over a map visits keys sorted and binds $k, $v; $ stays the root."""
    dot = {"m": {"b": 2, "a": 1}, "sep": ";"}
    assert render("{{ range $k, $v := .m }}{{ $k }}={{ $v }}{{ $.sep }}{{ end }}", dot) == (
        "a=1;b=2;"
    )


def test_range_over_an_empty_list_takes_else() -> None:
    """An empty range runs its else branch."""
    assert render("{{ range .l }}x{{ else }}none{{ end }}", {"l": []}) == "none"


def test_with_rebinds_dot_only_when_true() -> None:
    """with sets dot to a truthy value and skips the body otherwise."""
    assert render("{{ with .a }}{{ .b }}{{ end }}", {"a": {"b": "in"}}) == "in"
    assert render("[{{ with .a }}{{ .b }}{{ end }}]", {"a": {}}) == "[]"


def test_include_pipes_and_sprig_functions() -> None:
    """include renders a define with the given dot; toYaml, nindent, quote, default, min work."""
    helpers = '{{- define "n" -}}{{ .x | default "dflt" | quote }}{{- end -}}'
    assert render('{{ include "n" . }}', {"x": ""}, helpers=helpers) == '"dflt"'
    assert render("k:{{ toYaml .m | nindent 2 }}", {"m": {"b": [1], "a": True}}) == (
        "k:\n  a: true\n  b:\n  - 1"
    )
    assert render("{{ min .a .b }}", {"a": 40, "b": 12}) == "12"


def test_missing_key_is_empty_but_field_of_nil_fails() -> None:
    """A missing key prints nothing, a field of a missing key is an error, as in helm."""
    assert render("[{{ .nope }}]", {}) == "[]"
    with pytest.raises(TemplateError):
        render("{{ .nope.field }}", {})


@pytest.mark.parametrize(
    "source",
    ["{{ tpl .x . }}", '{{ template "x" }}', "{{ if .a }}open", "{{ end }}", "{{ .m }}"],
)
def test_outside_the_subset_fails_loudly(source: str) -> None:
    """Unknown functions, unsupported actions, unbalanced blocks and printing a map raise."""
    with pytest.raises(TemplateError):
        render(source, {"a": True, "m": {"k": 1}, "x": ""})

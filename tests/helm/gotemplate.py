"""A small renderer for the subset of Go templates (and Sprig functions) the chart uses.

No helm binary that renders templates can be installed here from the reachable registries, so
the tests render the chart with this module. It follows Go's ``text/template`` rules for what
the chart uses: ``{{-``/``-}}`` whitespace trimming, ``if``/``else if``/``else``, ``range`` over
lists and maps (maps in key order), ``with``, ``define``/``include``, variables, pipelines, and
Go's notion of truth (nil, false, 0, "" and empty collections are false). Anything outside the
subset raises ``TemplateError`` instead of rendering something helm would not, so a template
that drifts out of the subset fails the tests loudly. A missing map key reads as nil, and a
field of nil is an error, as in helm. ``test_renderer_matches_helm`` checks the output against
Helm's own engine, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["TemplateError", "TemplateSet", "go_string"]


class TemplateError(Exception):
    """A template uses something outside the subset, or fails as helm would fail."""


# --- values as Go prints and judges them ---------------------------------------------------


def go_string(value: Any) -> str:
    """Print a value as ``{{ value }}`` does in helm (nil prints as nothing)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise TemplateError(f"printing a {type(value).__name__} is outside the subset; use toYaml")


def truthy(value: Any) -> bool:
    """Go template truth: nil, false, zero, and empty strings or collections are false."""
    if value is None:
        return False
    if isinstance(value, bool | int | float | str | bytes | list | tuple | dict):
        return bool(value)
    return True


def _quote(value: Any) -> str:
    # Go's %q for the ASCII text the chart quotes; json.dumps escapes the same characters.
    return json.dumps(go_string(value), ensure_ascii=False)


def _indent(width: int, text: Any) -> str:
    pad = " " * int(width)
    return pad + go_string(text).replace("\n", "\n" + pad)


def _to_yaml(value: Any) -> str:
    if value is None:
        return "null"
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n")


def _printf(fmt: str, *args: Any) -> str:
    values = iter(args)

    def one(match: re.Match[str]) -> str:
        verb = match.group(0)
        if verb == "%%":
            return "%"
        if verb in ("%s", "%v", "%d"):
            return go_string(next(values))
        if verb == "%q":
            return _quote(next(values))
        raise TemplateError(f"printf verb {verb} is outside the subset")

    return re.sub(r"%.", one, fmt)


def _print(*args: Any) -> str:
    # Go's fmt.Sprint: a space between operands when neither side is a string.
    out = ""
    for i, arg in enumerate(args):
        if i and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out += " "
        out += go_string(arg)
    return out


def _index(collection: Any, *keys: Any) -> Any:
    for key in keys:
        if collection is None:
            raise TemplateError(f"index of nil with key {key!r}")
        if isinstance(collection, Mapping):
            collection = collection.get(key)
        else:
            collection = collection[int(key)]
    return collection


def _compare(name: str, op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        if isinstance(a, bool) != isinstance(b, bool) or (isinstance(a, str) != isinstance(b, str)):
            raise TemplateError(f"{name}: incompatible types {a!r} and {b!r}")
        return op(a, b)

    return compare


def _required(message: str, value: Any) -> Any:
    if value is None or value == "":
        raise TemplateError(message)
    return value


def _fail(message: str) -> Any:
    raise TemplateError(message)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "default": lambda fallback, value=None: value if truthy(value) else fallback,
    "quote": lambda *args: " ".join(_quote(a) for a in args if a is not None),
    "toYaml": _to_yaml,
    "toJson": lambda value: json.dumps(value, separators=(",", ":"), sort_keys=True),
    "toString": go_string,
    "nindent": lambda width, text: "\n" + _indent(width, text),
    "indent": _indent,
    "trunc": lambda n, text: go_string(text)[: int(n)],
    "trimSuffix": lambda suffix, text: go_string(text).removesuffix(suffix),
    "replace": lambda old, new, text: go_string(text).replace(old, new),
    "contains": lambda needle, text: needle in go_string(text),
    "printf": _printf,
    "print": _print,
    "sha256sum": lambda text: hashlib.sha256(go_string(text).encode()).hexdigest(),
    "base": lambda path: posixpath.basename(go_string(path)),
    "list": lambda *items: list(items),
    "index": _index,
    "hasKey": lambda mapping, key: key in mapping,
    "min": lambda *numbers: int(min(numbers)),
    "max": lambda *numbers: int(max(numbers)),
    "int": lambda value: int(value or 0),
    "not": lambda value: not truthy(value),
    "eq": lambda a, *others: any(a == o for o in others),
    "ne": lambda a, b: a != b,
    "lt": _compare("lt", lambda a, b: a < b),
    "le": _compare("le", lambda a, b: a <= b),
    "gt": _compare("gt", lambda a, b: a > b),
    "ge": _compare("ge", lambda a, b: a >= b),
    "empty": lambda value: not truthy(value),
    "required": _required,
    "fail": _fail,
}

# --- lexing ----------------------------------------------------------------------------------

_CONSTANTS: dict[str, Any] = {"true": True, "false": False, "nil": None}
_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*")
    | (?P<raw>`[^`]*`)
    | (?P<number>-?\d+(?:\.\d+)?)
    | (?P<declare>:=)
    | (?P<punct>[()|,=])
    | (?P<variable>\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
    | (?P<field>(?:\.[A-Za-z0-9_]+)+|\.)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.X,
)


@dataclass
class _Token:
    kind: str
    text: str


def _tokens(source: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    source = source.strip()
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if not match or match.end() == pos:
            raise TemplateError(f"cannot read {source[pos:]!r}")
        kind = match.lastgroup or ""
        out.append(_Token(kind, match.group(kind)))
        pos = match.end()
    return out


def _split(source: str) -> Iterator[tuple[str, str]]:
    """Yield ("text", s) and ("action", s) with Go's trim markers already applied."""
    pos = 0
    trim_next = False
    for match in _ACTION.finditer(source):
        text = source[pos : match.start()]
        if trim_next:
            text = text.lstrip()
        if match.group(1):
            text = text.rstrip()
        if text:
            yield "text", text
        yield "action", match.group(2).strip()
        trim_next = bool(match.group(3))
        pos = match.end()
    text = source[pos:]
    if trim_next:
        text = text.lstrip()
    if text:
        yield "text", text


# --- the tree ----------------------------------------------------------------------------------


@dataclass
class _Pipeline:
    declare: list[str]
    commands: list[list[_Token | _Pipeline]]


@dataclass
class _Node:
    kind: str  # text, output, if, range, with, assign
    text: str = ""
    pipeline: _Pipeline | None = None
    body: list[_Node] = field(default_factory=list)
    orelse: list[_Node] = field(default_factory=list)


def _parse_pipeline(tokens: list[_Token]) -> _Pipeline:
    declare: list[str] = []
    if any(t.kind == "declare" for t in tokens) or (
        len(tokens) > 1 and tokens[0].kind == "variable" and tokens[1].text == "="
    ):
        split = next(i for i, t in enumerate(tokens) if t.kind == "declare" or t.text == "=")
        declare = [t.text for t in tokens[:split] if t.kind == "variable"]
        tokens = tokens[split + 1 :]
    commands: list[list[_Token | _Pipeline]] = [[]]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.text == "|":
            commands.append([])
        elif token.text == "(":
            depth, j = 1, i + 1
            while depth:
                if j >= len(tokens):
                    raise TemplateError("unclosed parenthesis")
                depth += {"(": 1, ")": -1}.get(tokens[j].text, 0)
                j += 1
            commands[-1].append(_parse_pipeline(tokens[i + 1 : j - 1]))
            i = j
            continue
        else:
            commands[-1].append(token)
        i += 1
    if any(not command for command in commands):
        raise TemplateError("empty command in pipeline")
    return _Pipeline(declare, commands)


class _Parser:
    def __init__(self, source: str, defines: dict[str, list[_Node]]) -> None:
        self.items = list(_split(source))
        self.pos = 0
        self.defines = defines

    def parse(self, stop: tuple[str, ...] = ()) -> tuple[list[_Node], str]:
        nodes: list[_Node] = []
        while self.pos < len(self.items):
            kind, text = self.items[self.pos]
            self.pos += 1
            if kind == "text":
                nodes.append(_Node("text", text=text))
                continue
            if text.startswith("/*"):
                if not text.endswith("*/"):
                    raise TemplateError("unterminated comment")
                continue
            word = text.split(None, 1)[0] if text else ""
            rest = text[len(word) :].strip()
            if word in stop:
                return nodes, text
            if word in ("if", "range", "with"):
                nodes.append(self._block(word, rest))
            elif word == "define":
                name = json.loads(rest)
                self.defines[name], _ = self._expect_end(self.parse(("end",)))
            elif word in ("else", "end"):
                raise TemplateError(f"unexpected {word}")
            elif word in ("template", "block", "break", "continue"):
                raise TemplateError(f"{word} is outside the subset")
            else:
                pipeline = _parse_pipeline(_tokens(text))
                nodes.append(_Node("assign" if pipeline.declare else "output", pipeline=pipeline))
        if stop:
            raise TemplateError(f"missing {{{{end}}}} (expected one of {stop})")
        return nodes, ""

    @staticmethod
    def _expect_end(result: tuple[list[_Node], str]) -> tuple[list[_Node], str]:
        if result[1] != "end":
            raise TemplateError(f"expected end, got {result[1]!r}")
        return result

    def _block(self, word: str, rest: str) -> _Node:
        node = _Node(word, pipeline=_parse_pipeline(_tokens(rest)))
        node.body, closer = self.parse(("else", "end"))
        self._else(node, closer)
        return node

    def _else(self, node: _Node, closer: str) -> None:
        """Read what follows a block's body: nothing, ``else``, or ``else if`` (if only)."""
        if closer == "end":
            return
        condition = closer[len("else") :].strip()
        if not condition:
            node.orelse, _ = self._expect_end(self.parse(("end",)))
        elif node.kind == "if" and condition.startswith("if "):
            # `else if X` is an if nested in the else branch that shares the outer `end`.
            inner = _Node("if", pipeline=_parse_pipeline(_tokens(condition[len("if") :])))
            inner.body, inner_closer = self.parse(("else", "end"))
            self._else(inner, inner_closer)
            node.orelse = [inner]
        else:
            raise TemplateError(f"else {condition!r} is outside the subset")


# --- evaluation --------------------------------------------------------------------------------


class _Scope:
    def __init__(self, parent: _Scope | None = None, **variables: Any) -> None:
        self.parent = parent
        self.variables = dict(variables)

    def get(self, name: str) -> Any:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.variables:
                return scope.variables[name]
            scope = scope.parent
        raise TemplateError(f"undefined variable {name}")

    def set(self, name: str, value: Any) -> None:
        self.variables[name] = value


def _field(value: Any, name: str) -> Any:
    if value is None:
        raise TemplateError(f"nil pointer evaluating field {name}")
    if isinstance(value, Mapping):
        return value.get(name)
    attribute = getattr(value, name, None)
    if attribute is None:
        raise TemplateError(f"{type(value).__name__} has no field {name}")
    return attribute


def _chain(value: Any, path: str) -> Any:
    for name in [p for p in path.split(".") if p]:
        value = _field(value, name)
    return value


class TemplateSet:
    """Named templates (files and ``define`` blocks) rendered with helm's function subset."""

    def __init__(self) -> None:
        self.defines: dict[str, list[_Node]] = {}

    def add(self, name: str, source: str) -> None:
        """Parse a template file; its ``define`` blocks become includable by name."""
        nodes, _ = _Parser(source, self.defines).parse()
        self.defines[name] = nodes

    def render(self, name: str, dot: Any) -> str:
        """Render a template file or ``define`` by name with ``dot`` as ``.`` and ``$``."""
        if name not in self.defines:
            raise TemplateError(f"no template named {name!r}")
        return "".join(self._run(self.defines[name], dot, _Scope(**{"$": dot})))

    def _run(self, nodes: list[_Node], dot: Any, scope: _Scope) -> Iterator[str]:
        for node in nodes:
            if node.kind == "text":
                yield node.text
            elif node.kind == "output":
                yield go_string(self._pipeline(node.pipeline, dot, scope))
            elif node.kind == "assign":
                assert node.pipeline is not None
                value = self._pipeline(node.pipeline, dot, scope)
                scope.set(node.pipeline.declare[0], value)
            elif node.kind == "if":
                branch = node.body if truthy(self._pipeline(node.pipeline, dot, scope)) else None
                yield from self._run(
                    branch if branch is not None else node.orelse, dot, _Scope(scope)
                )
            elif node.kind == "with":
                value = self._pipeline(node.pipeline, dot, scope)
                if truthy(value):
                    yield from self._run(node.body, value, _Scope(scope))
                else:
                    yield from self._run(node.orelse, dot, _Scope(scope))
            elif node.kind == "range":
                yield from self._range(node, dot, scope)

    def _range(self, node: _Node, dot: Any, scope: _Scope) -> Iterator[str]:
        assert node.pipeline is not None
        collection = self._pipeline(node.pipeline, dot, scope)
        if isinstance(collection, Mapping):
            pairs = [(k, collection[k]) for k in sorted(collection)]
        elif collection is None:
            pairs = []
        elif isinstance(collection, list | tuple):
            pairs = list(enumerate(collection))
        else:
            raise TemplateError(f"range over {type(collection).__name__}")
        if not pairs:
            yield from self._run(node.orelse, dot, _Scope(scope))
            return
        names = node.pipeline.declare
        for key, value in pairs:
            inner = _Scope(scope)
            if len(names) == 1:
                inner.set(names[0], value)
            elif len(names) == 2:
                inner.set(names[0], key)
                inner.set(names[1], value)
            yield from self._run(node.body, value, inner)

    def _pipeline(self, pipeline: _Pipeline | None, dot: Any, scope: _Scope) -> Any:
        assert pipeline is not None
        value: Any = None
        for i, command in enumerate(pipeline.commands):
            piped = [value] if i else []
            value = self._command(command, piped, dot, scope)
        return value

    def _command(
        self, command: list[_Token | _Pipeline], piped: list[Any], dot: Any, scope: _Scope
    ) -> Any:
        head, args = command[0], command[1:]
        values = [self._operand(a, dot, scope) for a in args] + piped
        if isinstance(head, _Token) and head.kind == "ident" and head.text not in _CONSTANTS:
            if head.text == "include":
                name, context = values
                return self.render(name, context)
            if head.text in ("and", "or"):
                pick = (lambda v: not truthy(v)) if head.text == "and" else truthy
                return next((v for v in values if pick(v)), values[-1])
            function = FUNCTIONS.get(head.text)
            if function is None:
                raise TemplateError(f"function {head.text} is outside the subset")
            return function(*values)
        target = self._operand(head, dot, scope)
        if callable(target):
            return target(*values)
        if values:
            raise TemplateError(f"{target!r} is not a function")
        return target

    def _operand(self, operand: _Token | _Pipeline, dot: Any, scope: _Scope) -> Any:
        if isinstance(operand, _Pipeline):
            return self._pipeline(operand, dot, scope)
        kind, text = operand.kind, operand.text
        if kind == "string":
            return json.loads(text)
        if kind == "raw":
            return text[1:-1]
        if kind == "number":
            return float(text) if "." in text else int(text)
        if kind == "field":
            return _chain(dot, text)
        if kind == "variable":
            name, _, path = text.partition(".")
            return _chain(scope.get(name), path)
        if kind == "ident":
            if text in _CONSTANTS:
                return _CONSTANTS[text]
            raise TemplateError(f"function {text} used as a value")
        raise TemplateError(f"unexpected {text!r}")

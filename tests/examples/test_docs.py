"""The README and docs/ match the code: settings, metrics, names, links and commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import engine
from consumer import metrics
from consumer.settings import Settings, env_table
from engine.providers.settings import model_env_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
OURS = [README, ROOT / "examples" / "README.md", *(
    ROOT / "docs" / name
    for name in ("concepts.md", "agents.md", "production.md", "operating.md", "replay.md",
                 "hosting.md", "inspecting.md")
)]

# Variables the docs may name that are not service settings: the model provider's, the web
# search backend's, the demo agent's, the inspector's and the test suite's, read outside
# consumer/settings.py.
OTHER_ENV = {
    "OPENAI_API_KEY", "TURNFLOW_MODEL_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL", "TURNFLOW_MODEL", "TURNFLOW_MODEL_TIMEOUT", "TURNFLOW_DEMO_SILENCE_MS",
    "TURNFLOW_DEMO_PAYMENT_WAIT_MS", "TURNFLOW_REQUIRE_SERVERS", "KAFKA_SASL_PASSWORD_FILE",
    "TURNFLOW_BROKER_RESTART_CMD", "BRAVE_SEARCH_API_KEY", "TURNFLOW_MODEL_MAX_TOKENS",
    "TURNFLOW_MODEL_JSON_MODE", "TURNFLOW_MODEL_CACHE", "TURNFLOW_TEST_BROKER", "TEST_BROKER",
    "TURNFLOW_CACHE_DIR", "INSPECT_DATABASE_URL", "TURNFLOW_UI_TOKEN", "TURNFLOW_UI_TOKEN_FILE",
    "NO_COLOR", "TURNFLOW_LOCAL_MODEL", "TURNFLOW_MODEL_PROMPT_CACHE",
    "TURNFLOW_MODEL_PROMPT_LAYOUT", "TURNFLOW_MODEL_SLOTS", "TURNFLOW_TRACE_URL",
    "PHOENIX_PORT",  # the port `make phoenix-serve` gives the local trace store
    # `turnflow migrate`'s lock retries (migrations/online.py).
    "TURNFLOW_MIGRATE_LOCK_TIMEOUT_MS", "TURNFLOW_MIGRATE_LOCK_ATTEMPTS",
    # OpenTelemetry's standard variables, read by consumer/tracing.py and the SDK.
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_SDK_DISABLED",
}
# Upper-case words the pages quote as a command prints them, not variables.
PRINTED_WORDS = {"CHANGED", "UNDECIDABLE", "UTC", "LLM"}  # LLM: a span kind Phoenix shows


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_readme_first_screen_has_the_two_commands() -> None:
    """A newcomer sees `make run` and `make test` in the README's first 25 lines."""
    first_screen = "\n".join(_text(README).splitlines()[:25])
    assert "make run" in first_screen and "make test" in first_screen


@pytest.mark.parametrize("path", [README, ROOT / "docs" / "production.md"], ids=lambda p: p.name)
def test_env_table_is_the_settings_table(path: Path) -> None:
    """The configuration table is exactly what ``env_table()`` renders from the settings."""
    assert env_table() in _text(path)


def test_model_table_is_the_model_settings_table() -> None:
    """The README's model table is exactly what ``model_env_table()`` renders."""
    assert model_env_table() in _text(README)


def test_every_setting_is_documented() -> None:
    """Each settings field appears, as its environment variable, in the README."""
    readme = _text(README)
    missing = [name.upper() for name in Settings.model_fields if f"`{name.upper()}`" not in readme]
    assert missing == []


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_environment_variables_named_exist(path: Path) -> None:
    """Every upper-case variable a page names in backticks is a setting or a known extra."""
    settings = {name.upper() for name in Settings.model_fields}
    defaults = {str(field.default) for field in Settings.model_fields.values()}
    named = set(re.findall(r"`([A-Z][A-Z0-9_]{2,})(?:=[^`]*)?`", _text(path)))
    assert named - settings - defaults - OTHER_ENV - PRINTED_WORDS == set()


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_metric_names_exist(path: Path) -> None:
    """Every ``turnflow_*`` metric a page names is exported by consumer/metrics.py."""
    named = set(re.findall(r"\bturnflow_[a-z_]+", _text(path)))
    assert named - metrics.exported_names() == set()


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_engine_names_exist(path: Path) -> None:
    """Every ``engine.X`` and every name imported ``from engine`` on a page exists there."""
    text = _text(path)
    dotted = set(re.findall(r"\bengine\.([A-Za-z_]+)\b", text))
    imported = {
        name.strip()
        for group in re.findall(r"from engine import ([A-Za-z_, ]+)", text)
        for name in group.split(",")
    }
    modules = {"config", "providers", "phases", "lifecycle", "packs", "definition"}
    assert (dotted - modules) | imported <= set(engine.__all__)


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_local_links_resolve(path: Path) -> None:
    """Relative Markdown links point at files that exist."""
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", _text(path))
    broken = [t for t in targets if not (path.parent / t).exists()]
    assert broken == []


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_turnflow_commands_exist(path: Path) -> None:
    """Every ``turnflow <command>`` a page names is a command of the CLI or a planned one."""
    from consumer.cli import COMMANDS

    named = set(re.findall(r"`turnflow ([a-z]+)", _text(path)))
    assert named <= set(COMMANDS) | {"dev", "schedule", "bench"}


@pytest.mark.parametrize("path", [README, *DOCS, ROOT / "examples" / "README.md"],
                         ids=lambda p: p.name)
def test_docs_speak_of_the_behaviour_not_of_its_history(path: Path) -> None:
    """A reader has only the repository: no page points at texts outside it ("seed 000",
    "source texts", a spec folder) instead of saying what the behaviour is."""
    text = _text(path).lower()
    found = [w for w in ("seed 0", "seeds 0", "source text", "shared/spec", "engine.md",
                         "the seed") if w in text]
    assert found == []


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation other than ``-``
    and ``_`` dropped, spaces as ``-``; a repeated heading gets ``-1``, ``-2``, ...; plus any
    ``<a id=...>`` of its own."""
    seen: dict[str, int] = {}
    out: set[str] = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not (match := re.match(r"#{1,6} (.+)", line)):
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_anchors_resolve(path: Path) -> None:
    """Every ``#anchor`` a page links to, on itself or on another page of the repository, is a
    heading of that page."""
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#:\s]*)#([^)\s]+)\)", _text(path)):
        page = path if not target else path.parent / target
        if page.suffix == ".md" and page.exists() and anchor not in _anchors(_text(page)):
            broken.append(f"{target}#{anchor}")
    assert broken == []

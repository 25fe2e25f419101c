"""Loading the agent named by AGENT / --agent."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from consumer.agents import load_agent
from consumer.errors import AgentImportError


class EchoAgent:
    async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
        return {}


@pytest.fixture
def agents_module() -> Iterator[str]:
    module = types.ModuleType("fake_agents_for_test")
    module.agent = EchoAgent()  # type: ignore[attr-defined]
    module.build = lambda: EchoAgent()  # type: ignore[attr-defined]
    module.EchoAgent = EchoAgent  # type: ignore[attr-defined]
    module.broken = lambda: 1 / 0  # type: ignore[attr-defined]
    module.not_an_agent = 42  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


def test_an_instance_a_factory_or_a_class_yields_an_agent(agents_module: str) -> None:
    """``module:agent``, ``module:build`` and ``module:EchoAgent`` all give an agent object."""
    for attribute in ("agent", "build", "EchoAgent"):
        assert isinstance(load_agent(f"{agents_module}:{attribute}"), EchoAgent)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("no-colon", "module:attribute"),
        ("no_such_module_abc:agent", "cannot import"),
        ("{m}:missing", "has no attribute"),
        ("{m}:not_an_agent", "not an agent"),
        ("{m}:broken", "ZeroDivisionError"),
    ],
)
def test_bad_paths_raise_agent_import_error(agents_module: str, path: str, fragment: str) -> None:
    """Every way an agent path can be wrong is an AgentImportError naming the problem."""
    with pytest.raises(AgentImportError, match=fragment):
        load_agent(path.format(m=agents_module))


def test_a_module_in_the_current_folder_is_found_without_pythonpath(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AGENT=shop.agents:agent`` is found in the working directory, as uvicorn finds apps."""
    package = tmp_path / "shop_for_cwd_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "agents.py").write_text(
        "class A:\n    async def turn(self, request):\n        return {}\n\nagent = A()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        agent = load_agent("shop_for_cwd_test.agents:agent")
        assert type(agent).__name__ == "A"
        assert sys.path[0] == str(tmp_path)
    finally:
        for name in ("shop_for_cwd_test.agents", "shop_for_cwd_test"):
            sys.modules.pop(name, None)

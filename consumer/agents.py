"""Loading the agent named by ``AGENT`` / ``--agent`` (``module:attribute``).

The current folder is importable first, as uvicorn, celery and gunicorn make it: from the project
folder ``AGENT=examples.demo_agent:agent turnflow consume`` finds ``examples/`` without a
``PYTHONPATH``. The attribute may be an agent (anything with ``async turn(request)``) or a
zero-argument callable returning one, so an example module can build its agent lazily.
Failures raise ``AgentImportError`` with a one-line reason the CLI prints.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any

from consumer.errors import AgentImportError

__all__ = ["import_attribute", "import_here", "load_agent"]


def load_agent(path: str) -> Any:
    """Import ``module:attribute`` and return the agent it names."""
    target = import_attribute(path, "agent")
    if isinstance(target, type) or (not hasattr(target, "turn") and callable(target)):
        try:
            target = target()
        except Exception as exc:
            raise AgentImportError(
                f"building the agent {path!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
    if not callable(getattr(target, "turn", None)):
        raise AgentImportError(f"{path!r} is not an agent (no turn method)")
    return target


def import_here(module_name: str) -> ModuleType:
    """``module_name`` imported with the current folder importable first, as ``python -m`` has
    it."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(module_name)


def import_attribute(path: str, what: str) -> Any:
    """The object ``module:attribute`` names (the attribute may be dotted), the current folder
    importable first; ``what`` ("agent", "a pack") opens the message of a malformed ``path``."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise AgentImportError(f"{what} must be 'module:attribute', got {path!r}")
    try:
        target: Any = import_here(module_name)
    except Exception as exc:
        raise AgentImportError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise AgentImportError(f"{module_name!r} has no attribute {attribute!r}") from None
    return target

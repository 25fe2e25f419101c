"""``turnflow bench``: the end-to-end load benchmark, ``bench/e2e_bench.py`` of the source tree.

The benchmark is not part of the installed package (it drives the servers with load and is
run from a checkout), so this command loads it from the repository next to ``consumer/`` and
says so in one line when it is not there.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from consumer.cli.running import EXIT_CONFIG, fail

__all__ = ["add_arguments", "run"]

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "e2e_bench.py"


def _load() -> ModuleType | None:
    """The benchmark module, loaded once; None outside a source checkout."""
    if "e2e_bench" in sys.modules:
        return sys.modules["e2e_bench"]
    if not _SCRIPT.is_file():
        return None
    spec = importlib.util.spec_from_file_location("e2e_bench", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["e2e_bench"] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def add_arguments(parser: argparse.ArgumentParser) -> None:
    module = _load()
    if module is not None:
        module.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    module = _load()
    if module is None:
        return fail(f"the benchmark needs a source checkout ({_SCRIPT} is missing)", EXIT_CONFIG)
    code: int = module.run(args)
    return code

"""``turnflow bench``: the end-to-end load benchmark, the ``bench.e2e_bench`` module of a source
checkout.

The benchmarks are not part of the installed package (they drive the servers with load and are
run from a checkout), so this command imports the module from the current folder, as ``AGENT``
modules are found, and says in one line what to do when the folder is not a checkout's root.
"""

from __future__ import annotations

import argparse
import os
from types import ModuleType

from consumer.agents import import_here
from consumer.cli.running import EXIT_CONFIG, fail

__all__ = ["add_arguments", "run"]

MODULE = "bench.e2e_bench"


def _load() -> ModuleType | None:
    """The benchmark module; None when the current folder holds no source checkout's ``bench``."""
    try:
        return import_here(MODULE)
    except ModuleNotFoundError as exc:
        if exc.name in ("bench", MODULE):
            return None
        raise


def add_arguments(parser: argparse.ArgumentParser) -> None:
    module = _load()
    if module is not None:
        module.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    module = _load()
    if module is None:
        return fail(
            f"the benchmark is part of a source checkout, not the installed package: run "
            f"`turnflow bench` from the checkout's root ({MODULE} is not importable from "
            f"{os.getcwd()})",
            EXIT_CONFIG,
        )
    code: int = module.run(args)
    return code

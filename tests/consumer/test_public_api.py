"""The consumer package's public API and its cheap import."""

from __future__ import annotations

import subprocess
import sys

import consumer


def test_every_exported_name_resolves() -> None:
    """Each name in ``consumer.__all__`` is importable from the package root."""
    for name in consumer.__all__:
        assert getattr(consumer, name) is not None, name


def test_cli_import_does_not_load_kafka_or_the_engine() -> None:
    """Importing the CLI (as ``turnflow migrate`` does) leaves aiokafka, engine and store
    unloaded until a command needs them."""
    code = (
        "import sys, consumer.cli; "
        "print(sorted(m for m in ('aiokafka', 'engine', 'store') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"

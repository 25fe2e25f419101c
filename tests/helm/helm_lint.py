"""``helm lint`` through the Helm Go library that the PyPI package ``helm-sdkpy`` ships.

No helm command-line binary can be installed from the registries this project uses, but
``helm-sdkpy`` carries Helm's own Go code as a shared library with a lint entry point: it renders
every template with the chart's values, checks them against ``values.schema.json`` and parses the
output, as ``helm lint`` does. It has no client-only render, so ``helm template`` output comes
from ``chart_render`` instead, which ``test_renderer_matches_helm`` holds to Helm's output.

The package declares Python >= 3.12 only for its Python wrapper, which these tests do not
import: the Makefile installs it with ``--ignore-requires-python --no-deps``, and the library is
called through ctypes in a child process, so the Go runtime never shares the test process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LintResult", "helm_library", "lint_chart"]

_SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}

_CHILD = r"""
import ctypes, json, sys
library = ctypes.CDLL(sys.argv[1])
library.helm_sdkpy_last_error.restype = ctypes.c_char_p
handle = ctypes.c_uint64()
if library.helm_sdkpy_config_create(b"default", b"", b"", b"{}", ctypes.byref(handle)):
    sys.exit("config: " + library.helm_sdkpy_last_error().decode())
result = ctypes.c_char_p()
if library.helm_sdkpy_lint(handle, sys.argv[2].encode(), ctypes.byref(result)):
    sys.exit("lint: " + library.helm_sdkpy_last_error().decode())
print(result.value.decode())
"""


@dataclass(frozen=True)
class LintResult:
    """What helm lint said: one (severity, path) per message; error details are not exported."""

    messages: list[tuple[str, str]]

    @property
    def errors(self) -> list[str]:
        """Paths that helm lint reported at ERROR severity."""
        return [path for severity, path in self.messages if severity == "ERROR"]


def helm_library() -> Path | None:
    """The installed Helm shared library, or None when helm-sdkpy is not installed here."""
    spec = importlib.util.find_spec("helm_sdkpy")
    if spec is None or not spec.submodule_search_locations:
        return None
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "_lib" / f"linux-{arch}" / "libhelm_sdkpy.so"
        if candidate.exists():
            return candidate
    return None


def lint_chart(chart_dir: Path, library: Path) -> LintResult:
    """Run Helm's lint action on a chart directory with its own values.yaml."""
    with tempfile.TemporaryDirectory() as home:
        # Helm's own state (cache, config, plugins) stays out of the user's home and the repo.
        helm_env = {
            f"HELM_{kind}_HOME": f"{home}/{kind.lower()}" for kind in ("CACHE", "CONFIG", "DATA")
        }
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(library), str(chart_dir)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **helm_env},
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"helm lint did not run: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    messages = [
        (_SEVERITY.get(m["Severity"], str(m["Severity"])), m["Path"])
        for m in report.get("Messages") or []
    ]
    return LintResult(messages=messages)

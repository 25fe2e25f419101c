"""Argument types shared by the subcommands: a bad value is refused by argparse (``turnflow:
argument --x: ...``, exit 2) before anything runs, never found later as a traceback."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["whole_number"]


def whole_number(at_least: int) -> Callable[[str], int]:
    """An ``int`` argument type refusing text that is not a whole number and numbers below
    ``at_least``."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError("not a whole number") from None
        if number < at_least:
            raise argparse.ArgumentTypeError(f"must be at least {at_least}")
        return number

    return parse

"""The value types of the suite's numeric options, shared by the plugin and ``opconform run``.

Each is an argparse ``type``: a bad value raises ``argparse.ArgumentTypeError`` with what was
expected, so the parser reports one line naming the option (``opconform run``: exit 2; pytest:
a usage error, exit 4) instead of a run whose correct backends fail. Torch-free: ``opconform
run`` imports it.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path


def seconds(value: str) -> float:
    """A time limit: a finite number of seconds, 0 or more (0: none). -1 reached SIGALRM's timer
    and failed every case with ``itimer_error``; NaN and inf are not a limit either."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected a finite number of seconds, 0 or more (0: none)"
        )
    return number


def positive(kind):
    """The type of an option that must be a positive ``kind`` (int or float; a float also finite)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0 or (kind is float and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    return parse


def count(value: str) -> int:
    """A number of cases: a whole number, 0 or more (0: no limit). -1 skipped every case."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a whole number, 0 or more (0: no limit)")
    return number


def unwritable(path: str | None) -> str | None:
    """Why a report cannot be written at ``path`` (``--opconform-json``), or None (also for no path).
    Checked when the run starts: the report is written after every case has run."""
    if path is None:
        return None
    target = Path(path)
    if target.is_dir():
        return "it is a directory"
    if not target.parent.is_dir():
        return f"no such directory {str(target.parent)!r}"
    if not os.access(target.parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        return "permission denied"
    return None

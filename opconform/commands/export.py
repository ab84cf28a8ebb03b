"""``opconform export``: golden cases of an op (generated, or a capture's calls) for a kernel test
that reads ``.bin`` or safetensors files (docs/capture.md, Export).

A non-empty ``--out`` is refused unless ``--overwrite`` (the earlier cases are removed, never
mixed with the new ones); an export whose estimated size passes ``--max-bytes`` is refused before
anything is written; a long export shows its progress on stderr, at most one line every
``PROGRESS_SECONDS``."""

from __future__ import annotations

import argparse
import re
import sys
import time

from opconform.commands import help_for, usage_error, writable_dir

HELP = help_for("export")
PROGRESS_SECONDS = 2.0
_SIZE = re.compile(r"(\d+)([KMG]?)", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--op", required=True, metavar="OP", help="an op of the replay table")
    parser.add_argument("--clause", default=None, metavar="ID", help="the clause (must be the op's)")
    parser.add_argument("--cases", default="4", metavar="N", help="how many cases (default 4)")
    parser.add_argument("--from-capture", default=None, metavar="DIR", help="the op's calls of a capture")
    parser.add_argument("--dtype", default="float32", metavar="DTYPE", help="generated cases' dtype")
    parser.add_argument("--format", required=True, choices=("safetensors", "bin"), help="the arrays' files")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the case_NNNN/ folders go")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the case_NNNN/ folders of an earlier export in DIR"
    )
    parser.add_argument(
        "--max-bytes", default="256M", metavar="SIZE",
        help="refuse an export estimated larger than this (bytes, or with K, M, G: 1024-based; default 256M)",
    )  # fmt: skip


def parse_size(text: str) -> int | None:
    """``256M`` -> 268435456; None unless a positive count of bytes (K, M, G: 1024-based)."""
    match = _SIZE.fullmatch(text.strip())
    if not match or int(match[1]) < 1:
        return None
    return int(match[1]) * _UNITS[match[2].lower()]


class Progress:
    """``progress`` for ``export_cases``: one line on ``stream`` at most every ``seconds`` (none
    for an export shorter than that); on a terminal the line is rewritten in place."""

    def __init__(self, stream=None, *, seconds: float | None = None, clock=time.monotonic):
        self.stream = sys.stderr if stream is None else stream
        self.seconds = PROGRESS_SECONDS if seconds is None else seconds
        self.clock, self.shown, self.width, self.open = clock, False, 0, False
        self.due = clock() + self.seconds

    def __call__(self, done: int, total: int, nbytes: int) -> None:
        from opconform.capture.export import size_text

        now, last = self.clock(), done == total
        if now < self.due and not (last and self.shown):  # the last line closes one already shown
            return
        self.due, self.shown = now + self.seconds, True
        line = f"opconform export: {done}/{total} cases, {size_text(nbytes)} written"
        if not self.stream.isatty():
            print(line, file=self.stream, flush=True)
            return
        shorter, self.width = max(0, self.width - len(line)), len(line)  # blank what a longer line left
        print("\r" + line + " " * shorter, end="\n" if last else "", file=self.stream, flush=True)
        self.open = not last

    def close(self) -> None:
        """End a line left open on a terminal (an export that stopped early), so the next starts clean."""
        if self.open:
            print(file=self.stream, flush=True)
            self.open = False


def run(args: argparse.Namespace) -> int:
    from opconform.capture.export import export_cases
    from opconform.capture.store import CaptureError

    try:
        cases = int(args.cases)
    except ValueError:
        return usage_error("export", f"--cases {args.cases!r}: expected an int >= 1")
    max_bytes = parse_size(args.max_bytes)
    if max_bytes is None:
        return usage_error(
            "export", f"--max-bytes {args.max_bytes!r}: expected a size > 0 such as 100M or 2G"
        )
    why = writable_dir(args.out)
    if why:
        return usage_error("export", f"--out {args.out}: cannot write there: {why}")
    progress = Progress()
    try:
        written = export_cases(
            args.op, out=args.out, fmt=args.format, cases=cases, clause=args.clause,
            from_capture=args.from_capture, dtype=args.dtype, overwrite=args.overwrite,
            max_bytes=max_bytes, progress=progress,
        )  # fmt: skip
    except (CaptureError, ValueError) as exc:
        progress.close()
        return usage_error("export", exc)
    print(f"wrote {len(written)} case(s) of {args.op} under {args.out}")
    return 0

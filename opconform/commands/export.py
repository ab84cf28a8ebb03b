"""``opconform export``: golden cases of an op (generated, or a capture's calls) for a kernel test
that reads ``.bin`` or safetensors files (docs/capture.md, Export)."""

from __future__ import annotations

import argparse

from opconform.commands import help_for, usage_error, writable_dir

HELP = help_for("export")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--op", required=True, metavar="OP", help="an op of the replay table")
    parser.add_argument("--clause", default=None, metavar="ID", help="the clause (must be the op's)")
    parser.add_argument("--cases", default="4", metavar="N", help="how many cases (default 4)")
    parser.add_argument("--from-capture", default=None, metavar="DIR", help="the op's calls of a capture")
    parser.add_argument("--dtype", default="float32", metavar="DTYPE", help="generated cases' dtype")
    parser.add_argument("--format", required=True, choices=("safetensors", "bin"), help="the arrays' files")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the case_NNNN/ folders go")


def run(args: argparse.Namespace) -> int:
    from opconform.capture.export import export_cases
    from opconform.capture.store import CaptureError

    try:
        cases = int(args.cases)
    except ValueError:
        return usage_error("export", f"--cases {args.cases!r}: expected an int >= 1")
    why = writable_dir(args.out)
    if why:
        return usage_error("export", f"--out {args.out}: cannot write there: {why}")
    try:
        written = export_cases(
            args.op, out=args.out, fmt=args.format, cases=cases, clause=args.clause,
            from_capture=args.from_capture, dtype=args.dtype,
        )  # fmt: skip
    except (CaptureError, ValueError) as exc:
        return usage_error("export", exc)
    print(f"wrote {len(written)} case(s) of {args.op} under {args.out}")
    return 0

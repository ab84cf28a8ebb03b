"""``opconform judge DIR --outputs DIR2``: the outputs a foreign harness wrote for exported cases,
judged under each case's clause (exit 1 on a failure or an unreadable case)."""

from __future__ import annotations

import argparse
import sys

from opconform.commands import help_for, usage_error, writable_dir

HELP = help_for("judge")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cases", metavar="DIR", help="the folder opconform export wrote")
    parser.add_argument(
        "--outputs", required=True, metavar="DIR2", help="the harness's case_NNNN/output_K files"
    )
    parser.add_argument(
        "--name", default="harness", metavar="NAME", help="the report's column (default harness)"
    )
    parser.add_argument("--out", default=None, metavar="DIR", help="write report.json/.md/.html there")


def run(args: argparse.Namespace) -> int:
    from opconform import render, report
    from opconform.capture.golden import judge_outputs
    from opconform.capture.store import CaptureError

    why = writable_dir(args.out) if args.out else None
    if why:
        return usage_error("judge", f"--out {args.out}: cannot write there: {why}")
    try:
        document, problems = judge_outputs(args.cases, args.outputs, source=args.name)
    except CaptureError as exc:
        return usage_error("judge", exc)
    data = document.to_dict()
    print(render.text(data))
    for problem in problems:
        print(f"opconform judge: {problem}", file=sys.stderr)
    if args.out:
        print("\nwrote " + ", ".join(map(str, render.write_outputs(data, args.out))))
    return 0 if report.conforms(data) and not problems else 1

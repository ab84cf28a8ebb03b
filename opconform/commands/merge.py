"""``opconform merge``: several machines' reports as one matrix (exit 1 if it holds a MUST failure,
or with --strict a SHOULD one; 3 if an input run lacked a device it was asked to test)."""

from __future__ import annotations

import argparse
import sys

from opconform import fold, render, report
from opconform.commands import EXIT_DEVICE_ABSENT, help_for, usage_error, writable_dir

HELP = help_for("merge")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="reports of several runs")
    parser.add_argument("--out", default=None, metavar="DIR", help="write report.json/.md/.html of the merge")
    parser.add_argument("--markdown", action="store_true", help="print the Markdown (for a CI job summary)")
    parser.add_argument("--strict", action="store_true", help="exit 1 on a SHOULD failure too")
    parser.add_argument("--fold-cards", action="store_true",
                        help="one column for a backend's cards that agree; a card that disagrees keeps "
                             "its own and heads the report")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    why = writable_dir(args.out) if args.out else None
    if why:
        return usage_error("merge", f"--out {args.out}: cannot write there: {why}")
    names = [str(p) for p in args.reports]
    document = report.merge([report.load(p) for p in args.reports], names=names)
    if args.fold_cards:
        document = fold.fold(document)
    print(render.markdown(document) if args.markdown else render.text(document))
    if args.out:
        written = render.write_outputs(document, args.out)
        print("\nwrote " + ", ".join(map(str, written)), file=sys.stderr if args.markdown else sys.stdout)
    absent = [(m["name"], m["absent_devices"]) for m in document["merged_from"] if m["absent_devices"]]
    for name, devices in absent:  # that run's cases on the device are skips: the matrix lacks them
        listed = "; ".join(f"{d} ({why})" for d, why in devices.items())
        print(f"opconform merge: {name}: requested device(s) absent: {listed}", file=sys.stderr)
    if absent:
        return EXIT_DEVICE_ABSENT
    return 0 if report.conforms(document, strict=args.strict) else 1

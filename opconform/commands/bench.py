"""``opconform bench``: time and measure every op on every backend, device and the oracle.

``opconform bench [--quick] [--case SUBSTR] [--backend NAME] [--device cpu] [--out DIR]
[--json PATH] [--chart PATH]`` (``--help`` for all options, ``--list`` for the cases). It prints a
table, then the warnings raised meanwhile (one line each), and writes JSON and a PNG chart of the
ratios into ``--out`` (default: a new temporary folder, printed; never the current folder); see
``opconform.bench.orchestrate`` for what runs. A device named with ``--device`` that is absent is
exit 3 with one line, as for ``opconform run``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from conformance.devices import KNOWN_DEVICE_TYPES, absent_reason
from conformance.options import positive
from opconform.bench.orchestrate import DTYPES, BenchUsageError, run_bench
from opconform.bench.output import (
    format_case_list,
    format_relative_targets,
    format_table,
    format_targets,
    format_warnings,
    write_chart,
)
from opconform.commands import EXIT_DEVICE_ABSENT, help_for, usage_error, writable_dir

HELP = help_for("bench")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: the first case of each op at tiny shapes, few repeats, inline",
    )
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="SUBSTR",
        help="run only cases whose id contains SUBSTR (repeatable; see --list)",
    )
    parser.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="backends/peers to run besides the oracle (repeatable; default: all; 'oracle' alone: only it)",
    )
    parser.add_argument(
        "--backend-module",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="also load external backends from MODULE.ATTR",
    )
    parser.add_argument(
        "--device",
        action="append",
        default=[],
        choices=KNOWN_DEVICE_TYPES,
        help="device type (repeatable; default: every present one)",
    )
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES, help="input dtype (default bfloat16)")
    parser.add_argument("--warmup", type=positive(int), help="warm-up calls per implementation")
    parser.add_argument("--repeats", type=positive(int), help="timed calls per implementation (at most)")
    parser.add_argument(
        "--budget",
        type=positive(float),
        metavar="SECONDS",
        help="timed seconds per implementation; slow calls get fewer repeats (min 3 full, 2 quick)",
    )
    parser.add_argument(
        "--timeout",
        type=positive(float),
        metavar="SECONDS",
        help="kill a worker after this long (an error row)",
    )
    parser.add_argument(
        "--isolation",
        choices=("process", "inline"),
        help="process: a fresh worker per measurement (clean peak memory; the default); "
        "inline: in this process (compiles are shared, memory indicative only; "
        "the default with --quick)",
    )
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="folder of the JSON and chart (default: a new temp one)"
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="JSON output path (default: in --out)")
    parser.add_argument("--chart", default=None, metavar="PATH", help="PNG chart path (default: in --out)")
    parser.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")
    parser.add_argument("--list", action="store_true", help="list the cases and their shapes, then exit")


def _absent_line(absent: dict) -> None:
    listed = "; ".join(f"{d} ({why})" for d, why in absent.items())
    print(f"opconform bench: requested device(s) absent: {listed}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Run the bench; 0 when every measurement ran or was skipped with a reason, 1 on an error row,
    2 on bad options, 3 when a device named with --device is absent."""
    shape_set = "quick" if args.quick else "full"
    if args.list:
        print(format_case_list(shape_set))
        return 0
    if args.out is not None and (why := writable_dir(args.out)):
        return usage_error("bench", f"--out {args.out}: cannot write there: {why}")
    for option, path in (("--json", args.json), ("--chart", None if args.no_chart else args.chart)):
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return usage_error("bench", f"{option}: directory of {path!r} does not exist")
    absent = {d: why for d in dict.fromkeys(args.device) if (why := absent_reason(d))}
    if absent and len(absent) == len(set(args.device)):  # nothing to measure: say so before any work
        _absent_line(absent)
        return EXIT_DEVICE_ABSENT
    try:
        document = run_bench(
            shape_set=shape_set,
            case_patterns=args.case,
            backend_names=args.backend,
            backend_modules=args.backend_module,
            devices=args.device,
            dtype=args.dtype,
            warmup=args.warmup,
            repeats=args.repeats,
            budget_s=args.budget,
            timeout_s=args.timeout,
            isolation=args.isolation,
            progress=lambda message: print(message, file=sys.stderr, flush=True),
        )
    except BenchUsageError as exc:
        return usage_error("bench", exc)
    out = args.out or tempfile.mkdtemp(prefix="opconform-bench-")
    json_path = args.json or os.path.join(out, "opconform-bench.json")
    chart_path = args.chart or os.path.join(out, "opconform-bench.png")
    print(format_table(document))
    for block in (format_warnings(document), format_targets(document), format_relative_targets(document)):
        if block:
            print("\n" + block)
    document["chart"] = None
    if not args.no_chart:
        why_not = write_chart(document, chart_path)
        if why_not:
            document["chart_skipped"] = why_not
            print(f"\nchart skipped: {why_not}")
        else:
            document["chart"] = chart_path
            print(f"\nchart: {chart_path}")
    with open(json_path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    print(f"json: {json_path}   ({document['duration_s']:.1f} s)")
    if document["absent_devices"]:
        _absent_line(document["absent_devices"])
        return EXIT_DEVICE_ABSENT
    return 1 if any(r["status"] == "error" for r in document["results"]) else 0

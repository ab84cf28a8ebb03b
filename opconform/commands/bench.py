"""``opconform bench``: time and measure every op on every backend, device and the oracle.

``opconform bench [--quick] [--case SUBSTR] [--backend NAME] [--device cpu] [--json PATH]
[--chart PATH]`` (``--help`` for all options, ``--list`` for the cases). It prints a table,
writes JSON and a PNG chart of the ratios; see ``opconform.bench.orchestrate`` for what runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from conformance.devices import KNOWN_DEVICE_TYPES
from opconform.bench.orchestrate import DTYPES, BenchUsageError, run_bench
from opconform.bench.output import format_case_list, format_table, format_targets, write_chart
from opconform.commands import help_for

HELP = help_for("bench")


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0 or (kind is float and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    return parse


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
    parser.add_argument("--warmup", type=_positive(int), help="warm-up calls per implementation")
    parser.add_argument("--repeats", type=_positive(int), help="timed calls per implementation (at most)")
    parser.add_argument(
        "--budget",
        type=_positive(float),
        metavar="SECONDS",
        help="timed seconds per implementation; slow calls get fewer repeats (min 3 full, 2 quick)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive(float),
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
    parser.add_argument("--json", default="opconform-bench.json", metavar="PATH", help="JSON output path")
    parser.add_argument("--chart", default="opconform-bench.png", metavar="PATH", help="PNG chart path")
    parser.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")
    parser.add_argument("--list", action="store_true", help="list the cases and their shapes, then exit")


def _usage_error(message: str) -> int:
    print(f"opconform bench: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run the bench; 0 when every measurement ran or was skipped with a reason, 1 on an error row,
    2 on bad options."""
    shape_set = "quick" if args.quick else "full"
    if args.list:
        print(format_case_list(shape_set))
        return 0
    for option, path in (("--json", args.json), ("--chart", None if args.no_chart else args.chart)):
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return _usage_error(f"{option}: directory of {path!r} does not exist")
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
        return _usage_error(str(exc))
    print(format_table(document))
    targets = format_targets(document)
    if targets:
        print("\n" + targets)
    document["chart"] = None
    if not args.no_chart:
        why_not = write_chart(document, args.chart)
        if why_not:
            document["chart_skipped"] = why_not
            print(f"\nchart skipped: {why_not}")
        else:
            document["chart"] = args.chart
            print(f"\nchart: {args.chart}")
    with open(args.json, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    print(f"json: {args.json}   ({document['duration_s']:.1f} s)")
    return 1 if any(r["status"] == "error" for r in document["results"]) else 0

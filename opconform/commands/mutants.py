"""``opconform mutants``: the suite against every mutant, and the kill matrix
(``opconform.mutation`` runs the batches and judges them)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from opconform import mutation
from opconform.commands import EXIT_INCOMPLETE, help_for, usage_error, writable_dir

HELP = help_for("mutants")


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number, {minimum} or more")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--family",
        action="append",
        default=[],
        metavar="NAME",
        help="mutant module to run, e.g. activations (repeatable; default: all)",
    )
    parser.add_argument("--profile", default="ci-noshrink", help="Hypothesis profile (default: %(default)s)")
    parser.add_argument(
        "--jobs",
        "-j",
        type=_count(1),
        default=os.cpu_count() or 1,
        help="parallel pytest processes (default: the CPU count)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("opconform-report"),
        help="where kill-matrix.json and kill-matrix.md go (default: %(default)s)",
    )
    parser.add_argument("--false-alarm-seeds", type=_count(0), default=0, metavar="N",
                        help="also run the built-in backends under N Hypothesis seeds and report every "
                        "failure as a false alarm (slow: one whole conformance run per seed)")  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed on to pytest")


def run(args: argparse.Namespace) -> int:
    """The kill matrix; every argument is checked before the first batch starts (exit 2)."""
    known = mutation.families()
    names = [k.split(".", 1)[1] for k in known]
    unknown = [name for name in args.family if f"mutants.{name}" not in known]
    if unknown:
        return usage_error("mutants", f"--family: unknown {', '.join(unknown)}; known: {', '.join(names)}")
    selected = list(dict.fromkeys(f"mutants.{name}" for name in args.family)) or known
    why = writable_dir(args.out)
    if why:
        return usage_error("mutants", f"--out {args.out}: cannot write there: {why}")
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=args.jobs) as pool:
            batches = pool.map(lambda name: mutation.run_batch(name, profile=args.profile, workdir=Path(tmp),
                                                      extra=args.pytest_args), selected)  # fmt: skip
            documents = dict(zip(selected, batches, strict=True))
            sweep = None
            if args.false_alarm_seeds:
                sweep = mutation.false_alarm_sweep(
                    args.false_alarm_seeds, workdir=Path(tmp), workers=str(args.jobs), extra=args.pytest_args
                )
    except mutation.PytestUsageError as exc:  # the first batch's pytest refused the arguments
        return usage_error("mutants", exc)
    except mutation.BatchError as exc:
        print(f"opconform mutants: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE
    all_verdicts = [v for name in selected for v in mutation.verdicts(name, documents[name])]
    totals = mutation.summary(all_verdicts) | {
        "wall_seconds": round(time.monotonic() - started, 2),
        "profile": args.profile,
    }
    document = {"schema": "opconform-kill-matrix", "version": mutation.SCHEMA_VERSION, "summary": totals,
                "batches": {name: documents[name].meta["wall_seconds"] for name in selected},
                "mutants": [asdict(v) for v in all_verdicts], "false_alarms": sweep}  # fmt: skip
    (args.out / "kill-matrix.json").write_text(json.dumps(document, indent=1))
    text = mutation.markdown(all_verdicts, totals)
    if sweep:
        text += (
            f"\nFalse alarms: {len(sweep['failures'])} failing cases of the built-in backends over "
            f"{sweep['seeds']} Hypothesis seeds ({sum(r['cases'] for r in sweep['runs'])} cases run).\n"
        )
        text += "".join(f"- seed {f['seed']}: {f['nodeid']}\n" for f in sweep["failures"])
    (args.out / "kill-matrix.md").write_text(text)
    print(
        text
        + f"Wall time {totals['wall_seconds']} s; wrote {args.out / 'kill-matrix.json'} and kill-matrix.md"
    )
    clean = not (sweep and sweep["failures"])
    return 0 if totals["killed_by_right_clause"] == totals["mutants"] and clean else 1

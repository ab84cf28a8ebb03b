"""`opconform mutants`: run the conformance suite against every mutant and print the kill matrix.

Each module of the ``mutants`` package is one batch: its ``BACKENDS`` are loaded with
``--backend-module`` (exactly as a user's backend is) into one pytest process that runs the
family's properties (``PROPERTIES``, module names under ``conformance``) in the ``ci-noshrink``
profile: the ``ci`` profile's examples and verdicts, without shrinking. Batches run in parallel.
A mutant is *killed* when at least one case fails; the kill is *right* when one of the clauses
named in its failure messages is one of the mutant's ``clauses``. The time to kill is the sum of
the mutant's own case durations, in execution order, up to and including its first failure:
what a run of that mutant alone with ``-x`` would take, startup excluded.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCHEMA_VERSION = 1


@dataclass
class Verdict:
    mutant: str
    family: str
    doc: str
    expected: list[str]
    killed: bool = False
    killing_clauses: list[str] = field(default_factory=list)
    right_clause: bool = False
    seconds_to_kill: float | None = None
    cases: int = 0


def families(package: str = "mutants") -> list[str]:
    """Module names of the mutant catalogue, e.g. ``mutants.activations``."""
    root = importlib.import_module(package)
    return [f"{package}.{m.name}" for m in pkgutil.iter_modules(root.__path__) if not m.name.startswith("_")]


def run_batch(module_name: str, *, profile: str, workdir: Path, extra: list[str]) -> dict:
    """One pytest process for one mutant module; returns its --opconform-json document."""
    module = importlib.import_module(module_name)
    report = workdir / f"{module_name}.json"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
        "--pyargs", *module.PROPERTIES,
        f"--backend-module={module_name}:BACKENDS", f"--hypothesis-profile={profile}",
        f"--opconform-json={report}", *extra,
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ))
    if not report.exists():
        raise RuntimeError(
            f"{module_name}: pytest wrote no results (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    document = json.loads(report.read_text())
    document["wall_seconds"] = round(time.monotonic() - started, 2)
    return document


def verdicts(module_name: str, document: dict) -> list[Verdict]:
    module = importlib.import_module(module_name)
    family = module_name.rsplit(".", 1)[-1]
    entries = sorted(document["results"], key=lambda e: (e.get("start") or 0, e["nodeid"]))
    out = []
    for mutant in module.BACKENDS:
        verdict = Verdict(
            mutant=mutant.name,
            family=family,
            doc=((mutant.__doc__ or "").strip().splitlines() or [""])[0],
            expected=sorted(mutant.clauses),
        )
        elapsed = 0.0
        for entry in (e for e in entries if e["backend"] == mutant.name):
            verdict.cases += 1
            elapsed += entry.get("duration", 0.0)
            if entry["outcome"] != "failed":
                continue
            named = [c for c in entry["clauses"] if f"[{c}]" in entry.get("message", "")]
            if not verdict.killed:
                verdict.killed, verdict.seconds_to_kill = True, round(elapsed, 3)
            verdict.killing_clauses = sorted(set(verdict.killing_clauses) | set(named))
        verdict.right_clause = bool(set(verdict.killing_clauses) & set(verdict.expected))
        out.append(verdict)
    return out


def false_alarm_sweep(seeds: int, *, workdir: Path, workers: str, extra: list[str]) -> dict:
    """Run the built-in backends' conformance suite under ``seeds`` different Hypothesis seeds
    (the dev profile: random examples, 30 per property) and collect every failure: each one is a
    false alarm of the suite (or a real bug in a built-in backend), never expected."""
    failures, runs = [], []
    for seed in range(seeds):
        report = workdir / f"seed-{seed}.json"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "conformance",
                   "--hypothesis-profile=dev", f"--hypothesis-seed={seed}", f"--opconform-json={report}",
                   "-n", workers, *extra]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
        if not report.exists():
            raise RuntimeError(
                f"seed {seed}: pytest wrote no results (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
            )
        results = json.loads(report.read_text())["results"]
        failed = [e["nodeid"] for e in results if e["outcome"] == "failed"]
        failures += [{"seed": seed, "nodeid": nodeid} for nodeid in failed]
        runs.append({"seed": seed, "cases": len(results), "failed": len(failed),
                     "seconds": round(time.monotonic() - started, 1)})  # fmt: skip
        print(f"seed {seed}: {len(results)} cases, {len(failed)} failed, {runs[-1]['seconds']} s", flush=True)
    return {"seeds": seeds, "runs": runs, "failures": failures}


def summary(all_verdicts: list[Verdict]) -> dict:
    times = [v.seconds_to_kill for v in all_verdicts if v.seconds_to_kill is not None]
    right = sum(v.killed and v.right_clause for v in all_verdicts)
    return {
        "mutants": len(all_verdicts),
        "killed": sum(v.killed for v in all_verdicts),
        "killed_by_right_clause": right,
        "score": round(right / len(all_verdicts), 4) if all_verdicts else None,
        "median_seconds_to_kill": round(statistics.median(times), 3) if times else None,
        "worst_seconds_to_kill": round(max(times), 3) if times else None,
    }


def markdown(all_verdicts: list[Verdict], totals: dict) -> str:
    lines = [
        "| mutant | family | verdict | killed by | expected | time to kill (s) |",
        "|---|---|---|---|---|---|",
    ]
    for v in all_verdicts:
        state = (
            "killed" if v.killed and v.right_clause else ("killed, wrong clause" if v.killed else "SURVIVED")
        )
        ttk = f"{v.seconds_to_kill:.2f}" if v.seconds_to_kill is not None else "-"
        lines.append(
            f"| {v.mutant} | {v.family} | {state} | {', '.join(v.killing_clauses) or '-'} | "
            f"{', '.join(v.expected)} | {ttk} |"
        )
    lines.append("")
    lines.append(
        f"Mutation score {totals['killed_by_right_clause']}/{totals['mutants']} "
        f"(killed by one of the expected clauses); median time to kill "
        f"{totals['median_seconds_to_kill']} s, worst {totals['worst_seconds_to_kill']} s."
    )
    return "\n".join(lines) + "\n"


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
        type=int,
        default=os.cpu_count() or 1,
        help="parallel pytest processes (default: the CPU count)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("opconform-report"),
        help="where kill-matrix.json and kill-matrix.md go (default: %(default)s)",
    )
    parser.add_argument("--false-alarm-seeds", type=int, default=0, metavar="N",
                        help="also run the built-in backends under N Hypothesis seeds and report every "
                        "failure as a false alarm (slow: one whole conformance run per seed)")  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed on to pytest")


def run(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise SystemExit(f"opconform mutants: --jobs must be >= 1, got {args.jobs}")
    if args.false_alarm_seeds < 0:
        raise SystemExit(f"opconform mutants: --false-alarm-seeds must be >= 0, got {args.false_alarm_seeds}")
    known = families()
    selected = [f"mutants.{name}" for name in args.family] or known
    unknown = [name for name in selected if name not in known]
    if unknown:
        names = [k.split(".", 1)[1] for k in known]
        raise SystemExit(f"opconform mutants: --family: unknown {unknown}; known: {names}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        batches = pool.map(lambda name: run_batch(name, profile=args.profile, workdir=Path(tmp),
                                                  extra=args.pytest_args), selected)  # fmt: skip
        documents = dict(zip(selected, batches, strict=True))
        sweep = None
        if args.false_alarm_seeds:
            sweep = false_alarm_sweep(args.false_alarm_seeds, workdir=Path(tmp), workers=str(args.jobs),
                                      extra=args.pytest_args)  # fmt: skip
    all_verdicts = [v for name in selected for v in verdicts(name, documents[name])]
    totals = summary(all_verdicts) | {
        "wall_seconds": round(time.monotonic() - started, 2),
        "profile": args.profile,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    document = {"schema": "opconform-kill-matrix", "version": SCHEMA_VERSION, "summary": totals,
                "batches": {name: documents[name]["wall_seconds"] for name in selected},
                "mutants": [asdict(v) for v in all_verdicts], "false_alarms": sweep}  # fmt: skip
    (args.out / "kill-matrix.json").write_text(json.dumps(document, indent=1))
    text = markdown(all_verdicts, totals)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opconform mutants", description=MUTANTS.help)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def _command():
    from conformance.cli import Command

    return Command("run the suite against every mutant and print the kill matrix", add_arguments, run)


MUTANTS = _command()

if __name__ == "__main__":
    sys.exit(main())

"""`opconform mutants`: run the conformance suite against every mutant and print the kill matrix.

Each module of the ``mutants`` package is one batch: its ``BACKENDS`` are loaded with
``--backend-module`` (exactly as a user's backend is) into one pytest process that runs the
family's properties (``PROPERTIES``, module names under ``conformance``) in the ``ci-noshrink``
profile: the ``ci`` profile's examples and verdicts, without shrinking. Batches run in parallel.
A mutant is *killed* when at least one case fails a MUST clause; the kill is *right* when one of
the clauses its failures broke (``failure.clause`` in the results) is one of the mutant's
``clauses``. A mutant that only SHOULD clauses catch is a *hazard* (a wrong kernel a run would pass:
spec/README.md, Levels) unless it declares ``level = "SHOULD"`` with its reason in ``why``: a
robustness mistake (accepting bad input) that only a SHOULD clause can see, killed when one of its
``clauses`` fails at either level. The
time to kill is the sum of the mutant's own case durations, in execution order, up to and
including its first failure: what a run of that mutant alone with ``-x`` would take, startup excluded.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from conformance import results
from conformance.harness.profiles import SHORT_NAMES as SHORT_PROFILES
from conformance.results import Outcome
from opconform.commands import pytest_usage_line

SCHEMA_VERSION = 1
PYTEST_USAGE_ERROR = 4


class BatchError(RuntimeError):
    """A batch's pytest wrote no results (it crashed): its exit status and the tail of its output."""


class PytestUsageError(BatchError):
    """pytest refused the arguments (exit 4: an unknown option, profile or path): its one line."""


def _no_results(what: str, proc: subprocess.CompletedProcess) -> BatchError:
    line = pytest_usage_line(proc.stderr) if proc.returncode == PYTEST_USAGE_ERROR else None
    if line:
        return PytestUsageError(f"pytest arguments: {line}")
    return BatchError(f"{what}: pytest wrote no results (exit {proc.returncode}):\n"
                      f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")  # fmt: skip


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
    level: str = "MUST"  # the mutant's own: SHOULD for a robustness mistake only SHOULD clauses see
    should_clauses: list[str] = field(default_factory=list)  # SHOULD clauses its failures broke

    @property
    def state(self) -> str:
        """killed, killed (SHOULD), killed, wrong clause, HAZARD (only SHOULD clauses catch it), SURVIVED."""
        if self.killed and self.right_clause:
            return "killed (SHOULD)" if self.level == "SHOULD" and not self.killing_clauses else "killed"
        if self.killed:
            return "killed, wrong clause"
        return "HAZARD: only SHOULD clauses catch it" if self.should_clauses else "SURVIVED"


def families(package: str = "mutants") -> list[str]:
    """Module names of the mutant catalogue, e.g. ``mutants.activations``."""
    root = importlib.import_module(package)
    return [f"{package}.{m.name}" for m in pkgutil.iter_modules(root.__path__) if not m.name.startswith("_")]


def run_batch(
    module_name: str | list[str], *, profile: str, workdir: Path, extra: list[str]
) -> results.Document:
    """One pytest process for one mutant module (or several: one interpreter start and one import of
    torch for all, their properties collected once); returns its --opconform-json document."""
    names = [module_name] if isinstance(module_name, str) else list(module_name)
    modules = [importlib.import_module(name) for name in names]
    properties = list(dict.fromkeys(p for module in modules for p in module.PROPERTIES))
    report = workdir / f"{'+'.join(names)}.json"
    # The suite's profiles are registered as opconform-NAME; a short name means the suite's.
    profile = f"opconform-{profile}" if profile in SHORT_PROFILES else profile
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
        "--pyargs", *properties, *(f"--backend-module={name}:BACKENDS" for name in names),
        f"--hypothesis-profile={profile}",
        f"--opconform-json={report}", *extra,
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ))
    if not report.exists():
        raise _no_results(" + ".join(names), proc)
    document = results.load(report)
    document.meta["wall_seconds"] = round(time.monotonic() - started, 2)
    return document


def verdicts(module_name: str, document: results.Document) -> list[Verdict]:
    module = importlib.import_module(module_name)
    family = module_name.rsplit(".", 1)[-1]
    cases = sorted(document.results, key=lambda c: (c.start, c.nodeid))
    out = []
    for mutant in module.BACKENDS:
        verdict = Verdict(
            mutant=mutant.name,
            family=family,
            doc=((mutant.__doc__ or "").strip().splitlines() or [""])[0],
            expected=sorted(mutant.clauses),
            level=getattr(mutant, "level", "MUST"),
        )
        elapsed = 0.0
        for case in (c for c in cases if c.backend == mutant.name):
            verdict.cases += 1
            elapsed += case.duration
            if case.outcome not in (Outcome.FAILED, Outcome.SHOULD_FAILED):
                continue
            named = [case.failure.clause] if case.failure and case.failure.clause else []
            counts = case.outcome == Outcome.FAILED or (
                verdict.level == "SHOULD" and set(named) & set(verdict.expected)
            )
            if case.outcome == Outcome.SHOULD_FAILED:
                verdict.should_clauses = sorted(set(verdict.should_clauses) | set(named))
            else:
                verdict.killing_clauses = sorted(set(verdict.killing_clauses) | set(named))
            if counts and not verdict.killed:
                verdict.killed, verdict.seconds_to_kill = True, round(elapsed, 3)
        found = set(verdict.killing_clauses) | (
            set(verdict.should_clauses) if verdict.level == "SHOULD" else set()
        )
        verdict.right_clause = bool(found & set(verdict.expected))
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
                   "--hypothesis-profile=opconform-dev", f"--hypothesis-seed={seed}",
                   f"--opconform-json={report}", "-n", workers, *extra]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
        if not report.exists():
            raise _no_results(f"seed {seed}", proc)
        cases = results.load(report).results
        failed = [c.nodeid for c in cases if c.outcome == Outcome.FAILED]
        failures += [{"seed": seed, "nodeid": nodeid} for nodeid in failed]
        runs.append({"seed": seed, "cases": len(cases), "failed": len(failed),
                     "seconds": round(time.monotonic() - started, 1)})  # fmt: skip
        print(f"seed {seed}: {len(cases)} cases, {len(failed)} failed, {runs[-1]['seconds']} s", flush=True)
    return {"seeds": seeds, "runs": runs, "failures": failures}


def summary(all_verdicts: list[Verdict]) -> dict:
    times = [v.seconds_to_kill for v in all_verdicts if v.seconds_to_kill is not None]
    right = sum(v.killed and v.right_clause for v in all_verdicts)
    return {
        "mutants": len(all_verdicts),
        "killed": sum(v.killed for v in all_verdicts),
        "killed_by_right_clause": right,
        "hazards": [v.mutant for v in all_verdicts if v.state.startswith("HAZARD")],
        "should_level": [v.mutant for v in all_verdicts if v.level == "SHOULD"],
        "score": round(right / len(all_verdicts), 4) if all_verdicts else None,
        "median_seconds_to_kill": round(statistics.median(times), 3) if times else None,
        "worst_seconds_to_kill": round(max(times), 3) if times else None,
    }


def markdown(all_verdicts: list[Verdict], totals: dict) -> str:
    lines = [
        "| mutant | family | level | verdict | killed by (MUST) | also SHOULD | expected | time to kill (s) "
        "|",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in all_verdicts:
        ttk = f"{v.seconds_to_kill:.2f}" if v.seconds_to_kill is not None else "-"
        lines.append(
            f"| {v.mutant} | {v.family} | {v.level} | {v.state} | {', '.join(v.killing_clauses) or '-'} | "
            f"{', '.join(v.should_clauses) or '-'} | {', '.join(v.expected)} | {ttk} |"
        )
    lines.append("")
    lines.append(
        f"Mutation score {totals['killed_by_right_clause']}/{totals['mutants']} "
        f"(killed by one of the expected clauses: a MUST clause, or for the {len(totals['should_level'])} "
        f"mutants declared SHOULD (robustness mistakes) a SHOULD one); hazards (only SHOULD clauses "
        f"catch them): {len(totals['hazards'])}; median time to kill "
        f"{totals['median_seconds_to_kill']} s, worst {totals['worst_seconds_to_kill']} s."
    )
    return "\n".join(lines) + "\n"

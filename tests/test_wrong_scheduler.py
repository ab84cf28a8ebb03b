"""Scheduler mutants are caught through the real entry point, with the clause named."""

from __future__ import annotations

import pytest
from suite_runner import failed_clauses, outcomes, run_suite

from mutants import scheduler as mutants

BY_NAME = {m.name: m for m in mutants.BACKENDS}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_suite(
        tmp_path_factory.mktemp("mutants-scheduler"),
        paths=["conformance/test_scheduler.py"],
        modules=["mutants.scheduler:BACKENDS", "mutants.scheduler:CORRECT"],
    )


def test_every_scheduler_mutant_is_caught(results):
    """Each mutant fails one of the clauses its bug breaks, naming it; the mutants' shared base (the
    oracle cast to the model dtype) passes every clause; the run exits 1.

    One test, so that under xdist the suite subprocess runs once, not once per worker."""
    named = failed_clauses(results)
    missed = {
        name: (sorted(mutant.clauses), sorted(named.get(name, set())))
        for name, mutant in BY_NAME.items()
        if not named.get(name, set()) & mutant.clauses
    }
    assert not missed, f"mutant -> (expected one of, named): {missed}\n" + results["stdout"][-3000:]
    counts = outcomes(results, "correct-port")
    assert counts.get("passed", 0) > 0 and not counts.get("failed"), results["stdout"][-3000:]
    assert results["returncode"] == 1

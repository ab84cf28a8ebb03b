"""Mask and attention mutants are caught through the real entry point, with the clause named."""

from __future__ import annotations

import pytest
from suite_runner import failed_clauses, run_suite

from mutants import masks as mutants

BY_NAME = {m.name: m for m in mutants.BACKENDS}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_suite(
        tmp_path_factory.mktemp("mutants-masks"),
        paths=["conformance/test_masks.py", "conformance/test_attention.py"],
        modules=["mutants.masks:BACKENDS"],
        # the properties that name the mutants' clauses; the rest only add shrinking time
        extra=["-k", "matches_oracle or converter or scale_is or float32_mask"],
    )


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_mask_mutant_is_caught(results, name):
    """The mutant fails at least one of the clauses its bug breaks, and the failure names it."""
    named = failed_clauses(results).get(name, set())
    assert named & BY_NAME[name].clauses, (
        f"{name}: expected a failure naming one of {sorted(BY_NAME[name].clauses)}; named {sorted(named)}\n"
        + results["stdout"][-3000:]
    )


def test_suite_exit_status_reports_the_failures(results):
    """A run with mutants exits 1 (tests failed)."""
    assert results["returncode"] == 1

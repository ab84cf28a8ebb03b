"""Wrong activation implementations are caught through the real entry point, naming the clause."""

from __future__ import annotations

import pytest
from suite_runner import failed_clauses, run_suite
from wrong import activations as wrong


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_suite(tmp_path_factory.mktemp("wrong-activations"), paths=["conformance/test_activations.py"],
                     modules=["wrong.activations:BACKENDS"])


@pytest.mark.parametrize("name", sorted(wrong.EXPECTED))
def test_wrong_activation_is_caught(results, name):
    """The wrong backend fails at least one of the clauses its bug breaks, and the failure names it."""
    named = failed_clauses(results).get(name, set())
    assert named & wrong.EXPECTED[name], (
        f"{name}: expected a failure naming one of {sorted(wrong.EXPECTED[name])}; named {sorted(named)}\n"
        + results["stdout"][-3000:]
    )


def test_suite_exit_status_reports_the_failures(results):
    """A run with wrong backends exits 1 (tests failed)."""
    assert results["returncode"] == 1

"""The mutant catalogue: every mutant is caught, through the real entry point, by a clause it names.

The families' mutants run in four pytest subprocesses of two families each
(opconform.mutation.run_batch, the runner of `opconform mutants`: an interpreter start and an
import of torch cost about 2 CPU-s a process), in the ci profile's examples, restricted with
--focus-declared-clauses to the properties of each mutant's declared clauses and stopped at each
mutant's first failure (--opconform-backend-maxfail=1); the full kill matrix is `opconform mutants`.
"""

from __future__ import annotations

import importlib

import pytest

from conformance import spec_index
from conformance.results import Outcome
from opconform import mutation

FAMILIES = [name.split(".", 1)[1] for name in mutation.families()]
# Two families a run, paired so that the runs take about as long (CPU-s measured per family:
# activations 8, serving 7, rope 7, norms 6, the others 5; padding 3 beside a pair's start-up;
# invariance 1; quant 6.5 with its 41 mutants, the int4 Ascend one 0.5); a new family joins the lightest pair.
PAIRS = [
    ("activations", "masks"),
    ("serving", "kv_cache", "invariance"),
    ("rope", "norms", "quant"),
    ("scheduler", "moe", "padding"),
]


def catalogue():
    return [(family, m) for family in FAMILIES for m in importlib.import_module(f"mutants.{family}").BACKENDS]


def test_catalogue_is_documented():
    """Every mutant has a unique name, a docstring with its bug, origin and 'Caught by:' clauses,
    and declares only clauses that exist in spec/."""
    names = [m.name for _, m in catalogue()]
    assert len(names) == len(set(names)) and len(names) >= 30, names
    known = set(spec_index.load_clauses())
    for family, mutant in catalogue():
        doc = mutant.__doc__ or ""
        assert "Origin:" in doc and "Caught by:" in doc, f"{family}/{mutant.name}: no Origin/Caught by"
        assert mutant.clauses and set(mutant.clauses) <= known, f"{mutant.name}: {mutant.clauses}"
        stated = doc.split("Caught by:", 1)[1]
        assert all(c in stated for c in mutant.clauses), f"{mutant.name}: docstring omits {mutant.clauses}"


def test_a_mutant_caught_only_by_should_clauses_is_declared_so():
    """A mutant whose every declared clause is SHOULD is a robustness mistake: it says so
    (``level = "SHOULD"``, with ``why``); a MUST mutant declares at least one MUST clause, so a
    run passing MUST clauses can never hide it (spec/README.md, Levels)."""
    clauses = spec_index.load_clauses()
    for _, mutant in catalogue():
        levels = {clauses[c].level for c in mutant.clauses}
        declared = getattr(mutant, "level", "MUST")
        assert declared == ("SHOULD" if levels == {"SHOULD"} else "MUST"), (mutant.name, levels, declared)
        assert declared == "MUST" or getattr(mutant, "why", None), f"{mutant.name}: level SHOULD without why"


def test_every_family_is_in_one_pair():
    """A family missing from PAIRS would never run its mutants here."""
    paired = [family for pair in PAIRS for family in pair]
    assert sorted(paired) == sorted(FAMILIES), (paired, FAMILIES)


@pytest.mark.parametrize("pair", PAIRS, ids="+".join)
def test_every_mutant_is_killed_by_a_declared_clause(pair, tmp_path):
    """One subprocess per pair of families: each mutant fails, and a failure breaks one of its clauses."""
    extra = ["--focus-declared-clauses", "--opconform-backend-maxfail=1"]  # a kill needs one failure
    modules = [f"mutants.{family}" for family in pair]
    document = mutation.run_batch(modules, profile="ci-noshrink", workdir=tmp_path, extra=extra)
    verdicts = [v for module in modules for v in mutation.verdicts(module, document)]
    assert len(verdicts) == sum(len(importlib.import_module(m).BACKENDS) for m in modules)
    wrong = {
        v.mutant: (v.expected, v.killing_clauses, v.should_clauses, v.state)
        for v in verdicts
        if not (v.killed and v.right_clause)
    }
    assert not wrong, f"mutant -> (declared clauses, MUST and SHOULD clauses that failed, verdict): {wrong}"
    # Fail-fast did its job: no mutant has a second failure, and cases after the first were skipped.
    failures = [c.backend for c in document.results if c.outcome == Outcome.FAILED]
    assert len(failures) == len(set(failures)), f"a mutant failed twice despite maxfail 1: {failures}"
    assert any("--opconform-backend-maxfail=1" in (c.reason or "") for c in document.results)

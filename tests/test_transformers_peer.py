"""The built-in ``transformers`` backend, the field's reference, through the suite: no MUST failure.

One run (tests/suite_runner.py, the ``opconform-few`` profile) of the whole suite on the backend (its
n/i ops skip at no cost). Each failed case's clause comes from the results JSON and its level from
spec/ (``conformance.spec_index``): a SHOULD failure is expected (transformers' modules validate
nothing; SHOULD_BUGS lists the real bugs among them, each still seen); a MUST failure is an adapter
bug, a false alarm of the suite or a transformers bug, and fails here unless PENDING or
TRANSFORMERS_BUGS names it, with its reason. A bug of the platform under transformers is an expected
failure of expectations/transformers.toml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import torch

from backends import builtin_backends, not_implemented_reason
from backends.protocols import OPS
from conformance import results
from conformance.spec_index import load_clauses
from tests.suite_runner import REPO, produced_once, run_suite

pytest.importorskip("transformers", reason="transformers (peers extra) is not installed")

BACKEND = "transformers"
Outcome = results.Outcome
FAILED = (Outcome.FAILED, Outcome.SHOULD_FAILED, Outcome.TIMEOUT, Outcome.CRASH)


@dataclass(frozen=True)
class Known:
    """MUST failures of one cause: a clause of ``clauses`` whose failure message matches ``pattern``."""

    clauses: tuple[str, ...]
    pattern: str
    why: str

    def matches(self, clause: str, message: str) -> bool:
        return clause in self.clauses and re.search(self.pattern, message, re.DOTALL) is not None


# (b) Suite false alarms: MUST demands that correct transformers code fails, pending their fix in the
# scope named (issue 36). Remove an entry when its fix merges (the test fails naming a stale one).
PENDING: list[Known] = []

# (c) Real transformers bugs the suite finds at MUST level, with a reproducer in the reason. (A platform
# bug under transformers is declared in expectations/transformers.toml instead: ATTN-NAN's CPU SDPA zeros.)
TRANSFORMERS_BUGS: list[Known] = []

# (d) Real transformers bugs on inputs no released model passes: SHOULD failures, each still seen.
SHOULD_BUGS = [
    Known(("ROPE-LAYER-TRUNCATE",), r"layer_type='full_attention'.*'rope_type': 'yarn'[^}]*'truncate': False",
          "transformers 5.24 modeling_rope_utils._compute_yarn_parameters reads truncate = "
          "config.rope_parameters.get('truncate', True), the top-level dict: a per-layer yarn dict's "
          "truncate=False is ignored (reproduced by test_per_layer_yarn_truncate_is_ignored)"),
]  # fmt: skip


def _run(folder) -> dict:
    extra = ["--backend", BACKEND, "--device", "cpu", "-p", "few_examples"]
    return run_suite(folder, paths=["conformance"], modules=[], extra=extra, pythonpath=[REPO / "tests"],
                     profile="few")  # fmt: skip


def _failures(cases, level: str) -> list[tuple[str, str, str]]:
    """(nodeid, clause, message) of each failed case whose clause has ``level``."""
    clauses = load_clauses()
    found = []
    for case in cases:
        if case.outcome in FAILED:
            clause = case.failure.clause if case.failure and case.failure.clause else case.clauses[0]
            message = (case.failure and case.failure.message) or case.message or ""
            if clauses[clause].level == level:
                found.append((case.nodeid, clause, message))
    return found


# One test for the one suite run: under pytest-xdist, a second test would hold another worker
# waiting for it (produced_once).
def test_transformers_has_no_must_failure(tmp_path_factory):
    """No MUST failure but the known ones, each of those still seen; SHOULD failures and passes seen."""
    document = produced_once(tmp_path_factory, "opconform-transformers-peer", _run)
    cases = [case for case in results.Document.from_dict(document).results if case.backend == BACKEND]
    assert cases, document["stdout"][-3000:]
    must, known = _failures(cases, "MUST"), PENDING + TRANSFORMERS_BUGS
    unexplained = [f for f in must if not any(k.matches(f[1], f[2]) for k in known)]
    assert not unexplained, "\n\n".join(f"{nodeid}\n  {message[:1500]}" for nodeid, _, message in unexplained)
    stale = [k.why for k in known if not any(k.matches(clause, message) for _, clause, message in must)]
    assert not stale, f"these causes no longer fail (fixed? remove their entries): {stale}"
    # transformers validates nothing: its bad-input clauses fail, at SHOULD level, not counted above.
    should_failures = _failures(cases, "SHOULD")
    should = {clause for _, clause, _ in should_failures}
    assert {"ACT-ERRORS", "NORM-ERRORS", "ROPE-ERRORS", "MOE-ERRORS", "MASK-ERRORS", "ATTN-ERRORS"} <= should
    unseen = [k.why for k in SHOULD_BUGS if not any(k.matches(c, m) for _, c, m in should_failures)]
    assert not unseen, f"these SHOULD bugs no longer fail (fixed? remove their entries): {unseen}"
    # ATTN-NAN's platform bug is an expected failure of its manifest entry, not a MUST failure.
    nan = [case for case in cases if re.search(r"test_attention.py::test_\w+_nan_reaches", case.nodeid)]
    assert nan and all(case.outcome == Outcome.EXPECTED_FAILURE for case in nan), [
        (case.nodeid, case.outcome) for case in nan
    ]
    # MoE forms no model has (its routers and blocks raise NotImplementedError) and padded rows' NaN weights
    assert {"MOE-COMBOS", "MOE-PADDED-FINITE"} <= should, should
    backend = next(b for b in builtin_backends() if b.name == BACKEND)
    families = {family for op, family in OPS.items() if not_implemented_reason(backend, op) is None}
    passed = {OPS[case.op] for case in cases if case.outcome == Outcome.PASSED and case.op}
    assert passed == families, (passed, families)  # every family it has ops of ran and passed somewhere


def test_per_layer_yarn_truncate_is_ignored():
    """SHOULD_BUGS' reproducer: a per-layer yarn dict's truncate=False gives the truncated frequencies."""
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    yarn = {"rope_type": "yarn", "factor": 4.0, "truncate": False}
    shape = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2)
    nested = transformers.Qwen2Config(
        **shape, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default"}, "full_attention": yarn},
    )  # fmt: skip
    per_layer = ROPE_INIT_FUNCTIONS["yarn"](nested, None, layer_type="full_attention")[0]
    flat = [transformers.Qwen2Config(**shape, rope_parameters={**yarn, "truncate": t}) for t in (False, True)]
    unrounded, truncated = (ROPE_INIT_FUNCTIONS["yarn"](config, None)[0] for config in flat)
    assert not torch.equal(unrounded, truncated)  # truncate matters for this dict
    assert torch.equal(per_layer, truncated), "fixed in transformers: remove SHOULD_BUGS' entry"

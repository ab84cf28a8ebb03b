"""The field's MoE conventions conform and its known MoE bugs still fail a MUST clause, through the
real entry point (spec/moe.md: MOE-SELECT's weights dtype and forms, MOE-TIES' scores in the logits'
dtype, MOE-PADDED's NaN weights, MOE-FUSED's activation names, MOE-TOL): tests/moe_field_backends.py,
transcribed from vLLM 0.33.0 and transformers 5.24.0."""

from __future__ import annotations

import convention_runs
import moe_field_backends as field
import pytest
import torch
from suite_runner import failed_clauses, outcomes

from conformance import spec_index
from conformance.checks import assert_close
from conformance.errors import ConformanceError
from conformance.moe_checks import call_routing, judge_routing
from conformance.strategies.moe import RoutingRecipe
from conformance.tolerances import routing_atol_scale, tolerance
from reference import moe as oracle


@pytest.fixture(scope="module")
def field_run(tmp_path_factory):
    """This module's backends' cases of the shared convention run (tests/convention_runs.py)."""
    return convention_runs.part(tmp_path_factory, "moe")


def _must(clauses) -> set[str]:
    known = spec_index.load_clauses()
    return {c for c in clauses if known[c].level == "MUST"}


@pytest.mark.parametrize("name", ["vllm-cpu-moe", "transformers-qwen3-gpt-oss", "vllm-torch-grouped-topk"])
def test_field_routers_and_experts_conform(field_run, name):
    """vLLM's CPU router (scores in the logits' dtype, float32 weights; the group score tied to the
    bias), vLLM's torch grouped_topk (softmax and sigmoid scores in the logits' dtype), transformers'
    Qwen3-MoE and gpt-oss routers (weights in the logits' dtype) and vLLM's MoE activations ("silu"
    clamping before the SiLU, "swiglustep" after) fail no MUST clause, NaN weights for padded rows
    included."""
    counts = outcomes(field_run, name)
    assert counts.get("passed", 0) >= 12, (counts, field_run["stdout"][-3000:])
    failed = failed_clauses(field_run, should=True).get(name, set())
    assert not _must(failed), (failed, field_run["stdout"][-6000:])
    # Where they used to fail: a group score the bias does not imply, gpt-oss's SwiGLU without a limit;
    # a padded row's NaN weights.
    assert {"MOE-COMBOS", "MOE-PADDED-FINITE"} <= failed, (failed, field_run["stdout"][-3000:])


@pytest.mark.parametrize(
    "name, clause",
    [
        ("wrong-factor-twice", "MOE-RSF-ONCE"),
        ("wrong-groups-masked-zero", "MOE-GROUPS"),
        ("wrong-bias-in-logits-dtype", "MOE-BIAS"),
        ("wrong-clamp-dropped", "MOE-CLAMP"),
        ("wrong-scores-in-bfloat16", "MOE-SELECT"),
    ],
)
def test_field_bugs_still_fail_a_must_clause(field_run, name, clause):
    """The factor applied twice, excluded groups at 0, the bias rounded to bfloat16 before the choice,
    the clamp dropped in the fused experts, the scores of float32 logits rounded to bfloat16: each fails
    its MUST clause."""
    assert clause in failed_clauses(field_run).get(name, set()), field_run["stdout"][-3000:]


def test_weight_sum_failures_lead_with_the_sum_and_the_factor(field_run):
    """MOE-RSF-ONCE and MOE-RENORM failures of the factor applied twice open with the weights' sum and
    what the factor and renormalize make it, before the largest violation."""
    for clause in ("MOE-RSF-ONCE", "MOE-RENORM"):
        verdicts = [
            line
            for line in field_run["stdout"].splitlines()
            if line.startswith(f"[{clause}]") and "wrong-factor-twice" in line
        ]
        assert verdicts, (clause, field_run["stdout"][-3000:])
        assert all("weights sum to " in line and "routed_scaling_factor" in line for line in verdicts), (
            verdicts
        )


def test_routing_allowance_holds_vllm_cpu_softmax_only_with_its_exponent_term():
    """MOE-TOL: vLLM's CPU _softmax_topk in float16 (exp(x - logsumexp) op by op) errs beyond the bare
    float16 row on this draw, and within it plus routing_atol_scale's exponent term."""
    recipe = RoutingRecipe(tokens=6, experts=64, top_k=6, scoring="softmax", renormalize=False, num_groups=1,
                           topk_group=1, group_score="max", routed_scaling_factor=1.0, dtype=torch.float16,
                           seed=0)  # fmt: skip
    logits, _ = recipe.make()
    weights, ids = field.vllm_cpu_softmax_topk(logits, 6, False)
    want = oracle.routing_weights(
        logits, ids, scoring="softmax", renormalize=False, routed_scaling_factor=1.0
    )
    tol = tolerance("moe-routing", torch.float16)
    scale = routing_atol_scale(logits, ids, want, scoring="softmax", renormalize=False, dtype=torch.float16)
    assert_close(weights, want, clause="MOE-SELECT", context="c", tol=tol, atol_scale=scale)
    with pytest.raises(ConformanceError):
        assert_close(weights, want, clause="MOE-SELECT", context="c", tol=tol)


def test_routing_weights_of_a_third_dtype_fail():
    """MOE-SELECT: weights float32 or the logits' dtype; float64 weights of bfloat16 logits fail."""

    class Float64Weights:
        name = "float64-weights"

        def select_experts(self, router_logits, **options):
            return torch.full((2, 1), 1.0, dtype=torch.float64), torch.zeros(2, 1, dtype=torch.int64)

    options = dict(top_k=1, scoring="softmax", renormalize=True, num_groups=1, topk_group=1,
                   group_score="max", routed_scaling_factor=1.0)  # fmt: skip
    with pytest.raises(ConformanceError, match="expected float32 or the logits' dtype torch.bfloat16"):
        call_routing(Float64Weights(), torch.zeros(2, 4, dtype=torch.bfloat16), None, options,
                     clause="MOE-SELECT", context="c")  # fmt: skip


def test_scores_rounded_to_the_logits_dtype_choose_within_the_tie_tolerance(monkeypatch):
    """MOE-TIES: on this bfloat16 draw vLLM's grouped_topk (sigmoid in bfloat16, the float32 bias near 7)
    chooses other experts than the oracle; accepted, and rejected without the score-rounding term."""
    recipe = RoutingRecipe(tokens=6, experts=16, top_k=2, scoring="sigmoid", renormalize=True, num_groups=1,
                           topk_group=1, group_score="max", routed_scaling_factor=1.0, dtype=torch.bfloat16,
                           seed=3, bias="near7")  # fmt: skip
    logits, bias = recipe.make()
    weights, ids = field.vllm_grouped_topk(logits, 2, True, 1, 1, "sigmoid", 1.0, bias)
    _, want = oracle.select_experts(logits, correction_bias=bias, **recipe.options)
    assert not torch.equal(ids.long().sort(-1).values, want.sort(-1).values)
    judge_routing(weights, ids, logits, bias, recipe.options, clause="MOE-TIES", context="c")
    monkeypatch.setattr(
        "conformance.moe_checks.score_rounding", lambda scores, **_: torch.zeros(len(scores), 1)
    )
    with pytest.raises(ConformanceError, match="chose experts"):
        judge_routing(weights, ids, logits, bias, recipe.options, clause="MOE-TIES", context="c")

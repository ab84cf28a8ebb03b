"""Conformance properties for spec/moe.md: routing, shared-expert slots, the fused expert MLP, the
config reader. Routing is judged by conformance.moe_checks (MOE-TIES: any slot order, ties
accepted); fused outputs by the ``moe`` row scaled by moe_magnitude (MOE-TOL)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.moe import ERRORS
from conformance.checks import assert_close, check, describe
from conformance.harness.profiles import share_of_examples
from conformance.moe_checks import (
    call_routing,
    check_fused,
    check_routing,
    check_shared,
    check_valid_ids,
    routing_tol,
    sum_phrase,
)
from conformance.strategies.model_pins import expert_sizes, shared_counts, shared_routing
from conformance.strategies.moe import routing_recipes, score_rounding, tie_tolerance
from conformance.strategies.moe_fused import FusedRecipe, fused_model_form, fused_recipes
from reference import moe as oracle
from reference.moe_config import DEFAULTS

FEW = share_of_examples(0.17)  # 5 examples under ci: each clause's bug shows on most draws
SELECT = pytest.mark.op("select_experts")


@SELECT
@pytest.mark.clause("MOE-SELECT")
@FEW
@given(recipe=routing_recipes())
def test_select_experts_matches_oracle(backend, device, recipe):
    """Every scoring, group setting, bias kind, factor and dtype: the oracle's experts and weights."""
    check_routing(backend, device, recipe, "MOE-SELECT")


@SELECT
@pytest.mark.clause("MOE-SCORING")
@FEW
@given(recipe=routing_recipes(renormalize=(False,), bias_kinds=(None,), grouped=False))
def test_scoring_variants(backend, device, recipe):
    """softmax, sigmoid and top-k-then-softmax without renormalisation (where they differ)."""
    check_routing(backend, device, recipe, "MOE-SCORING")


@SELECT
@pytest.mark.clause("MOE-BIAS")
@FEW
@given(
    recipe=routing_recipes(
        scorings=("sigmoid", "softmax"),
        bias_kinds=("near7",),
        bias_dtype=torch.float32,
        dtypes=(torch.bfloat16, torch.float32),
        require_flip=True,
        grouped=False,
        tokens=6,
        experts=16,
    )
)
def test_float32_bias_selects(backend, device, recipe):
    """A float32 bias near 7 whose bfloat16 rounding changes the selection: the float32 selection."""
    check_routing(backend, device, recipe, "MOE-BIAS")


@SELECT
@pytest.mark.clause("MOE-GROUPS")
@FEW
@given(
    recipe=routing_recipes(scorings=("sigmoid",), bias_kinds=("negative",), grouped=True).filter(
        lambda r: r.topk_group < r.num_groups
    )
)
def test_groups_with_negative_scores(backend, device, recipe):
    """Negative selection scores inside the kept groups: no expert of an excluded group is chosen."""
    check_routing(backend, device, recipe, "MOE-GROUPS")


@SELECT
@pytest.mark.clause("MOE-RENORM")
@FEW
@given(recipe=routing_recipes(scorings=("softmax", "sigmoid"), factors=(2.5, 2.826, 16.0)))
def test_renormalisation_with_a_factor(backend, device, recipe):
    """renormalize on and off with routed_scaling_factor != 1: sum = rsf, or the raw scores times rsf."""
    check_routing(backend, device, recipe, "MOE-RENORM")


@SELECT
@pytest.mark.clause("MOE-TIES")
@FEW
@given(
    recipe=routing_recipes(bias_kinds=(None,), grouped=False, tie=True).filter(lambda r: r.top_k < r.experts)
)
def test_ties_are_accepted(backend, device, recipe):
    """Equal logits at the k-th boundary: either expert conforms, with its own weight."""
    check_routing(backend, device, recipe, "MOE-TIES")


@SELECT
@pytest.mark.clause("MOE-PADDED")
@FEW
@given(recipe=routing_recipes(), poison=st.sampled_from(("nan", "inf", "-inf")))
def test_padded_rows(backend, device, recipe, poison):
    """NaN/Inf in the first and last rows: valid distinct ids there, the oracle elsewhere."""
    check_routing(backend, device, replace(recipe, poison=poison, tokens=max(recipe.tokens, 3)), "MOE-PADDED")


def _fused_inputs(recipe, device, *, dtype=torch.float32, seed=0) -> tuple:
    hidden, inter = expert_sizes(recipe.experts)  # a model's (scaled) sizes in a profile run
    return FusedRecipe(
        tokens=recipe.tokens,
        hidden=hidden,
        inter=inter,
        experts=recipe.experts,
        top_k=recipe.top_k,
        activation="silu",
        limit=None,
        on_input=False,
        output_scale=1.0,
        dtype=dtype,
        seed=seed,
    ).make(device)[:3]


@SELECT
@pytest.mark.clause("MOE-RSF-ONCE")
@pytest.mark.op("fused_moe")
@FEW
@given(recipe=routing_recipes(scorings=("softmax", "sigmoid"), factors=(2.5, 2.826), dtypes=(torch.float32,)))
def test_scaling_factor_exactly_once(backend, device, recipe):
    """In the weights or on the output, end to end: rsf * sum_j s_j E_j(x), never 1x or rsf^2."""
    logits, bias = recipe.make(device)
    x, w13, w2 = _fused_inputs(recipe, device, seed=recipe.seed)
    rsf = recipe.routed_scaling_factor
    want_w, want_i = oracle.select_experts(
        logits.cpu(), correction_bias=None if bias is None else bias.cpu(), **recipe.options
    )
    options = dict(activation="silu", limit=None, apply_router_weight_on_input=False, output_scale=1.0)
    want = oracle.fused_moe(x.cpu(), w13.cpu(), w2.cpu(), want_w, want_i, **options)
    for where, select_rsf, output_scale in (("weights", rsf, 1.0), ("output", 1.0, rsf)):
        routing = {**recipe.options, "routed_scaling_factor": select_rsf}
        context = describe(backend, device, "select_experts+fused_moe", rsf=rsf, applied_in=where)
        w, i = call_routing(backend, logits, bias, routing, clause="MOE-RSF-ONCE", context=context)
        got = backend.fused_moe(x, w13, w2, w, i, **{**options, "output_scale": output_scale})
        by_id = oracle.routing_weights(logits.cpu(), i.cpu(), **{k: routing[k] for k in _WEIGHT_KEYS})
        relation = sum_phrase(w, by_id, routing) or _scale_phrase(got, want, rsf, where)
        check_fused(
            got,
            want,
            (x.cpu(), w13.cpu(), w2.cpu(), want_w, want_i),
            options,
            clause="MOE-RSF-ONCE",
            context=f"{context}: {relation}" if relation else context,
        )


_WEIGHT_KEYS = ("scoring", "renormalize", "routed_scaling_factor")


def _scale_phrase(got, want, rsf: float, where: str) -> str | None:
    """MOE-RSF-ONCE: how many times the oracle's output the backend's is (least squares), when that is
    not 1: the factor dropped or applied twice on its way through fused_moe."""
    got, want = got.detach().cpu().double().flatten(), want.flatten()
    ratio = float(got @ want / (want @ want).clamp_min(1e-300))
    if abs(ratio - 1) < 1e-2:
        return None
    return (
        f"output {ratio:#.4g} x the oracle's rsf * sum_j s_j E_j(x), expected 1 "
        f"(routed_scaling_factor {rsf:g} in the {where})"
    )


@SELECT
@pytest.mark.clause("MOE-PERMUTE")
@pytest.mark.op("fused_moe")
@FEW
@given(recipe=routing_recipes(grouped=False), data=st.data())
def test_permutations(backend, device, recipe, data):
    """Tokens permuted: rows permuted (routing and fused_moe); experts permuted with their bias: ids
    mapped through the permutation, weights by id unchanged."""
    logits, bias = recipe.make(device)
    context = describe(backend, device, "select_experts", **recipe.options)
    w, i = call_routing(backend, logits, bias, recipe.options, clause="MOE-PERMUTE", context=context)
    tokens = torch.tensor(data.draw(st.permutations(range(recipe.tokens))), device=device)
    pw, pi = call_routing(
        backend, logits[tokens], bias, recipe.options, clause="MOE-PERMUTE", context=context
    )
    tol = routing_tol(w, logits, both_sides=True)
    scores, sel = oracle.selection_scores(
        logits.cpu(), scoring=recipe.scoring, correction_bias=None if bias is None else bias.cpu()
    )
    ties = (sel, score_rounding(scores, scoring=recipe.scoring, logits_dtype=logits.dtype))
    rows = tokens.cpu()
    _same_by_id(w[tokens], i[tokens], pw, pi, tol, (ties[0][rows], ties[1][rows]),
                context=f"{context}: tokens permuted {tokens.tolist()}")  # fmt: skip
    experts = torch.tensor(data.draw(st.permutations(range(recipe.experts))), device=device)
    ew, ei = call_routing(
        backend,
        logits[:, experts],
        None if bias is None else bias[experts],
        recipe.options,
        clause="MOE-PERMUTE",
        context=context,
    )
    _same_by_id(
        w, i, ew, experts[ei.long()], tol, ties, context=f"{context}: experts permuted {experts.tolist()}"
    )
    x, w13, w2 = _fused_inputs(recipe, device, seed=recipe.seed)
    options = dict(activation="silu", limit=None, apply_router_weight_on_input=False, output_scale=1.0)
    out = backend.fused_moe(x, w13, w2, w, i, **options)
    permuted = backend.fused_moe(x[tokens], w13, w2, w[tokens], i[tokens], **options)
    check_fused(
        permuted,
        out[tokens],
        (x.cpu(), w13.cpu(), w2.cpu(), w.cpu(), i.cpu()),
        options,
        clause="MOE-PERMUTE",
        context=f"fused_moe on {backend.name!r}: tokens permuted",
        expected_as="unpermuted result, permuted",
    )


def _same_by_id(w, i, other_w, other_i, tol, ties, *, context: str) -> None:
    """The same ids and weights by id, where the two choices are not a tie (MOE-TIES: selection scores
    ``ties[0]`` within tie_tolerance of the score rounding ``ties[1]``, rows as ``i``'s)."""
    for chosen in (i, other_i):
        check_valid_ids(chosen, ties[0].shape[1], clause="MOE-PERMUTE", context=context)
    order, other = i.long().argsort(-1), other_i.long().argsort(-1)
    ids, other_ids = i.long().gather(1, order).cpu(), other_i.long().gather(1, other).cpu()
    sel, rounding = ties
    want_sel, got_sel = (sel.gather(1, x).sort(-1, descending=True).values for x in (ids, other_ids))
    same = (ids == other_ids).all(dim=-1)
    tied = ((got_sel - want_sel).abs() <= tie_tolerance(want_sel, rounding)).all(dim=-1)
    rows = (~same & ~tied).nonzero().flatten().tolist()
    check(
        not rows,
        clause="MOE-PERMUTE",
        message=f"{context}: token(s) {rows}: ids {other_ids[rows].tolist()}, expected {ids[rows].tolist()}",
    )
    same = same.to(w.device)
    assert_close(
        other_w.gather(1, other)[same],
        w.gather(1, order).double()[same],
        clause="MOE-PERMUTE",
        context=context,
        tol=tol,
        expected_as="unpermuted weights",
    )


def _config_cases() -> list:
    """Each model type with every field given (non-default), with none, and with each one left out."""
    given_values = {
        "num_experts_per_tok": 3,
        "n_group": 2,
        "topk_group": 1,
        "norm_topk_prob": False,
        "routed_scaling_factor": 1.5,
        "topk_method": "group_limited_greedy",
        "moe_router_scaling_factor": 2.0,
    }
    cases = []
    for model_type, fields in DEFAULTS.items():
        full = {"model_type": model_type, **{k: given_values[k] for k in fields}}
        cases.append(pytest.param(full, id=f"{model_type}-all"))
        if model_type != "deepseek_v2":  # its class defaults num_experts_per_tok, n_group, topk_group: None
            cases.append(pytest.param({"model_type": model_type}, id=f"{model_type}-none"))
        for name in fields:
            if model_type != "deepseek_v2" or name in ("topk_method", "routed_scaling_factor"):
                cases.append(
                    pytest.param({k: v for k, v in full.items() if k != name}, id=f"{model_type}-no-{name}")
                )
    return cases


@pytest.mark.clause("MOE-CONFIG")
@pytest.mark.op("moe_router_config")
@pytest.mark.parametrize("config", _config_cases())
def test_router_config(backend, device, config):
    """The select_experts keywords, bias use and output scale of each model type, missing fields at
    transformers' defaults."""
    got = backend.moe_router_config(config)
    want = oracle.moe_router_config(config)
    check(
        got == want,
        clause="MOE-CONFIG",
        message=f"moe_router_config({config}) on {backend.name!r}: {got}, expected {want}",
    )


@pytest.mark.clause("MOE-SHARED")
@pytest.mark.op("append_shared_experts")
@FEW
@given(
    recipe=shared_routing(routing_recipes(grouped=False, tokens=3)),
    on_output=st.booleans(),
    shared=shared_counts(),
    weights_dtype=st.sampled_from((torch.float32, torch.bfloat16)),
)
def test_shared_expert_slots(backend, device, recipe, on_output, shared, weights_dtype):
    """The routed slots unchanged, then one slot per shared expert: weight 1, or 1/rsf with rsf on the
    output."""
    logits, _ = recipe.make(device)
    w = torch.softmax(logits.float(), -1)[:, : recipe.top_k].to(weights_dtype).contiguous()
    ids_dtype = torch.int32 if recipe.seed % 2 else torch.int64
    i = torch.arange(recipe.top_k, device=device, dtype=ids_dtype).expand(recipe.tokens, -1).contiguous()
    check_shared(backend, device, recipe, on_output, shared, w, i, "MOE-SHARED")


@pytest.mark.clause("MOE-FUSED")
@pytest.mark.op("fused_moe")
@FEW
@given(recipe=fused_recipes())
def test_fused_moe_matches_oracle(backend, device, recipe):
    """Each activation, with and without limit, router weight on the input or the output, output_scale."""
    _compare_fused(backend, device, recipe, "MOE-FUSED")


@pytest.mark.clause("MOE-CLAMP")
@pytest.mark.op("fused_moe")
@FEW
@given(recipe=fused_recipes(limits=(0.5, 1.0, 3.0), x_scale=3.0))
def test_fused_moe_clamps(backend, device, recipe):
    """Hidden activations well past small limits: the clamp of the layer's limit inside the MLP, in
    each activation's order (before the SiLU, after it, gpt-oss's)."""
    for activation in oracle.ACTIVATIONS:
        form = replace(recipe, activation=activation)  # the output scale only where a model has one
        _compare_fused(backend, device, form if fused_model_form(form) else replace(form, output_scale=1.0),
                       "MOE-CLAMP")  # fmt: skip


def _compare_fused(backend, device, recipe, clause):
    inputs = recipe.make(device)
    got = backend.fused_moe(*inputs, **recipe.options)
    cpu = tuple(t.cpu() for t in inputs)
    want = oracle.fused_moe(*cpu, **recipe.options)
    check_fused(
        got,
        want,
        cpu,
        recipe.options,
        clause=clause,
        context=describe(backend, device, "fused_moe", **recipe.options) + f", {recipe}",
    )


@pytest.mark.clause("MOE-FUSED")
@pytest.mark.op("fused_moe")
@FEW
@given(recipe=fused_recipes(dtypes=(torch.float32,)))
def test_fused_moe_is_the_sum_of_its_slots(backend, device, recipe):
    """fused_moe over k slots equals the sum over j of fused_moe over slot j alone."""
    x, w13, w2, w, i = recipe.make(device)
    whole = backend.fused_moe(x, w13, w2, w, i, **recipe.options)
    parts = sum(
        backend.fused_moe(x, w13, w2, w[:, j : j + 1], i[:, j : j + 1], **recipe.options).double()
        for j in range(recipe.top_k)
    )
    context = describe(backend, device, "fused_moe", **recipe.options)
    check_fused(
        whole,
        parts,
        tuple(t.cpu() for t in (x, w13, w2, w, i)),
        recipe.options,
        clause="MOE-FUSED",
        context=context,
        expected_as="sum of slots",
    )


@pytest.mark.clause("MOE-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad input raises the documented exception type, with a message naming the argument."""
    check_backend_raises(case, backend, device)

"""SHOULD properties of spec/moe.md: the routing and expert combinations no released model uses
(MOE-COMBOS) and the views no caller passes (MOE-VIEWS), judged as their MUST counterparts judge the
model forms; padded rows' finite weights (MOE-PADDED-FINITE)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.checks import describe
from conformance.harness import profiles
from conformance.moe_checks import call_routing, check_fused, check_padded_finite, check_routing, check_shared
from conformance.strategies.model_pins import shared_counts, shared_routing
from conformance.strategies.moe import model_flags, model_form, routing_recipes
from conformance.strategies.moe_fused import fused_model_form, fused_recipes
from reference import moe as oracle

FEW = profiles.should_examples(0.17)  # every property here is a SHOULD one


def _unused(recipe) -> bool:
    return not model_form(recipe.scoring, recipe.bias, recipe.num_groups, recipe.group_score)


@pytest.mark.op("select_experts")
@pytest.mark.clause("MOE-COMBOS")
@FEW
@given(
    recipe=routing_recipes(scorings=("softmax", "sigmoid"), grouped=True, model_forms=False)
    .filter(_unused)
    .filter(lambda r: r.topk_group < r.num_groups)
)
def test_should_route_combinations_no_model_uses(backend, device, recipe):
    """Groups with softmax and a bias, or sigmoid without one, or a group score not the one the bias
    implies: the oracle's experts and weights."""
    check_routing(backend, device, recipe, "MOE-COMBOS")


@pytest.mark.op("select_experts")
@pytest.mark.clause("MOE-COMBOS")
@FEW
@given(
    recipe=routing_recipes(model_forms=False).filter(
        lambda r: (
            not model_flags(r.scoring, r.bias, r.num_groups, r.renormalize, r.routed_scaling_factor)
            or (r.bias is not None and r.bias_dtype != torch.float32)
        )
    )
)
def test_should_route_options_no_model_uses(backend, device, recipe):
    """A factor on top-k-then-softmax, a renormalised softmax with a bias and a factor, DeepSeek-V2's
    groups renormalised, a bfloat16 bias: the oracle's experts and weights."""
    check_routing(backend, device, recipe, "MOE-COMBOS")


@pytest.mark.op("fused_moe")
@pytest.mark.clause("MOE-COMBOS")
@FEW
@given(recipe=fused_recipes(model_forms=False).filter(lambda r: not fused_model_form(r)))
def test_should_compute_expert_combinations_no_model_uses(backend, device, recipe):
    """The router weight on the input with several experts, a limit or an output scale, gpt-oss's SwiGLU
    without a limit, an output scale on gpt-oss's or the clamped SiLU: the oracle's output."""
    _compare_fused(backend, device, recipe, "MOE-COMBOS")


@pytest.mark.op("select_experts")
@pytest.mark.clause("MOE-VIEWS")
@FEW
@given(recipe=routing_recipes(strided=True))
def test_should_route_strided_logits_and_bias(backend, device, recipe):
    """Logits rows 2E apart and a bias of stride 2: the oracle's experts and weights."""
    check_routing(backend, device, recipe, "MOE-VIEWS")


@pytest.mark.op("fused_moe")
@pytest.mark.clause("MOE-VIEWS")
@FEW
@given(recipe=fused_recipes(strided=True))
def test_should_compute_experts_on_views(backend, device, recipe):
    """x and the routing as views of wider rows, w13 and w2 stored column-major: the oracle's output."""
    _compare_fused(backend, device, recipe, "MOE-VIEWS")


def _compare_fused(backend, device, recipe, clause: str) -> None:
    inputs = recipe.make(device)
    got = backend.fused_moe(*inputs, **recipe.options)
    cpu = tuple(t.cpu() for t in inputs)
    want = oracle.fused_moe(*cpu, **recipe.options)
    context = f"fused_moe on backend {backend.name!r} @ {device}, {recipe}"
    check_fused(got, want, cpu, recipe.options, clause=clause, context=context)


@pytest.mark.op("append_shared_experts")
@pytest.mark.clause("MOE-VIEWS")
@FEW
@given(
    recipe=shared_routing(routing_recipes(grouped=False, tokens=3)),
    on_output=st.booleans(),
    shared=shared_counts(),
)
def test_should_append_shared_experts_to_views(backend, device, recipe, on_output, shared):
    """Top-k weights and ids as views of wider rows: the routed slots unchanged, the shared ones after."""
    logits, _ = recipe.make(device)
    w = torch.softmax(logits.float(), -1)[:, : recipe.top_k].contiguous()
    i = torch.arange(recipe.top_k, device=device).expand(recipe.tokens, -1).contiguous()
    check_shared(backend, device, replace(recipe, strided=True), on_output, shared, w, i, "MOE-VIEWS")


@pytest.mark.op("select_experts")
@pytest.mark.clause("MOE-PADDED-FINITE")
@FEW
@given(recipe=routing_recipes(), poison=st.sampled_from(("nan", "inf", "-inf")))
def test_should_give_padded_rows_finite_weights(backend, device, recipe, poison):
    """NaN/Inf in the first and last rows: finite weights there (vLLM's CUDA top-k kernel's clamp)."""
    recipe = replace(recipe, poison=poison, tokens=max(recipe.tokens, 3))
    logits, bias = recipe.make(device)
    context = describe(backend, device, "select_experts", **recipe.options, poison=poison)
    weights, _ = call_routing(
        backend, logits, bias, recipe.options, clause="MOE-PADDED-FINITE", context=context
    )
    check_padded_finite(weights, logits, clause="MOE-PADDED-FINITE", context=context)

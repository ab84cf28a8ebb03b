"""Conformance properties for spec/quant.md's w8a8 expert path (QUANT-MOE-W8A8 and its refinements).

The output is compared with the float64 oracle under QUANT-TOL's `quant-moe` row, whose atol scale
(``reference.quant_moe.w8a8_moe_error_scale``) allows a kernel's own requantization of its rounded
activation a few grid steps; the draws (``conformance.strategies.quant_moe``) make each clause's
mistake cost far more than that.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from conformance.checks import assert_close, describe
from conformance.harness import profiles
from conformance.strategies import quant_moe as draws
from conformance.tolerances import tolerance
from reference import quant_moe as oracle


def _moe(backend, device, recipe, clause):
    x, w13, w2, weights, ids, c13, c2 = recipe.make(device)
    t, h, i, e, k = recipe.shape
    context = describe(backend, device, "w8a8_fused_moe") + (
        f": x {x.dtype} [{t}, {h}], {e} experts of I {i}, k {k}, scales {tuple(c13.shape)}, ids {ids.dtype}, "
        f"weights {weights.dtype}, {recipe.feature}"
    )
    got = backend.w8a8_fused_moe(x, w13, w2, weights, ids, w13_scale=c13, w2_scale=c2)
    cpu = [v.cpu() for v in (x, w13, w2, weights, ids)]
    kw = {"w13_scale": c13.cpu(), "w2_scale": c2.cpu()}
    want, scale = oracle.w8a8_moe_reference(*cpu, **kw)
    tol = tolerance("quant-moe", x.dtype)
    assert_close(got, want, clause=clause, context=context, tol=tol, dtype=x.dtype, device=device,
                 atol_scale=scale)  # fmt: skip


@pytest.mark.clause("QUANT-MOE-W8A8")
@pytest.mark.op("w8a8_fused_moe")
@given(recipe=draws.w8a8_moe_inputs())
def test_w8a8_moe_matches_oracle(backend, device, recipe):
    """sum_j w_j * E_j(x): x quantized per token, w13 dequantized, SwiGLU, requantized, w2 dequantized."""
    _moe(backend, device, recipe, "QUANT-MOE-W8A8")


@pytest.mark.clause("QUANT-MOE-W8A8-INPUT")
@pytest.mark.op("w8a8_fused_moe")
@profiles.share_of_examples(1 / 3)  # a third: one feature each, every mutant of it killed on most draws
@given(recipe=draws.w8a8_moe_inputs(features=("plain",), shapes=draws.MANY_TOKENS))
def test_w8a8_moe_token_scale_follows_its_rows(backend, device, recipe):
    """Every expanded row of a token uses that token's input scale (tokens 2x to 8x apart)."""
    _moe(backend, device, recipe, "QUANT-MOE-W8A8-INPUT")


@pytest.mark.clause("QUANT-MOE-W8A8-SCALES")
@pytest.mark.op("w8a8_fused_moe")
@profiles.share_of_examples(1 / 3)  # a third: one feature each, every mutant of it killed on most draws
@given(recipe=draws.w8a8_moe_inputs(features=("plain",)))
def test_w8a8_moe_expert_channel_scales(backend, device, recipe):
    """Expert e's GEMMs use w13_scale[e, c] and w2_scale[e, n] (experts 2x to 8x apart)."""
    _moe(backend, device, recipe, "QUANT-MOE-W8A8-SCALES")


@pytest.mark.clause("QUANT-MOE-W8A8-REQUANT")
@pytest.mark.op("w8a8_fused_moe")
@profiles.share_of_examples(1 / 3)  # a third: one feature each, every mutant of it killed on most draws
@given(recipe=draws.w8a8_moe_inputs(features=("split",), shapes=draws.MANY_TOKENS))
def test_w8a8_moe_requantized_after_the_activation(backend, device, recipe):
    """silu(g) * u quantized per row after the activation: up channels 2^-6 of the gate's, tokens apart."""
    _moe(backend, device, recipe, "QUANT-MOE-W8A8-REQUANT")

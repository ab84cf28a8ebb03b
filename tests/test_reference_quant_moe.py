"""Self-test of the w8a8 expert oracle (reference/quant_moe.py) against a brute force written from
spec/quant.md's QUANT-MOE-W8A8 steps: Python fractions for the quantizations and the integer sums,
math.exp for the SiLU, one token and one slot at a time."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
import torch

from backends.native_quant import dynamic_int8_quant as quant_int8
from conformance.strategies.quant_moe import MOE_SHAPES, W8a8MoeRecipe
from conformance.tolerances import tolerance
from reference import quant_moe as oracle


def _quant(row: list) -> tuple[list[int], Fraction]:
    """QUANT-INT8-SCALE / -ROUND: scale amax / 127, q the quotient rounded half to even."""
    amax = max(abs(v) for v in row)
    return ([0] * len(row), Fraction(0)) if amax == 0 else ([round(v * 127 / amax) for v in row], amax / 127)


def _expert(v: list, w13, w2, c13, c2) -> list[float]:
    """Steps 1-4 of QUANT-MOE-W8A8 for one token and expert."""
    q1, s1 = _quant(v)
    h = [_dot(q1, row) * s1 * Fraction(c) for row, c in zip(w13, c13, strict=True)]
    inter = len(h) // 2
    silu = [Fraction(float(g) / (1 + math.exp(-float(g)))) for g in h[:inter]]
    act = [s * u for s, u in zip(silu, h[inter:], strict=True)]
    q2, s2 = _quant(act)
    return [float(_dot(q2, row) * s2 * Fraction(c)) for row, c in zip(w2, c2, strict=True)]


def _dot(q: list[int], row: list[int]) -> int:
    return sum(a * b for a, b in zip(q, row, strict=True))


def test_w8a8_moe_matches_brute_force():
    x, w13, w2, weights, ids, c13, c2 = W8a8MoeRecipe((3, 16, 8, 4, 2), torch.bfloat16, 5, "split").make()
    got = oracle.w8a8_fused_moe(x, w13, w2, weights, ids, w13_scale=c13, w2_scale=c2)
    for t in range(x.shape[0]):
        v = [Fraction(a) for a in x[t].double().tolist()]
        want = [0.0] * x.shape[1]
        for j, e in enumerate(ids[t].tolist()):
            y = _expert(v, w13[e].tolist(), w2[e].tolist(), c13[e].double().tolist(), c2[e].double().tolist())
            want = [a + weights[t, j].item() * b for a, b in zip(want, y, strict=True)]
        torch.testing.assert_close(got[t], torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-15)


def test_error_scale_is_requant_steps_of_the_down_projection():
    """QUANT-TOL: the scale's first term is `steps` grid steps through |w2_deq|, for k = 1 and one
    token: steps * s2 * sum_i |w2_deq[n, i]| plus 2 u |y|; 2 steps for float16, 3 for bfloat16."""
    assert (oracle.requant_steps(torch.float16), oracle.requant_steps(torch.bfloat16)) == (2, 3)
    x, w13, w2, weights, ids, c13, c2 = W8a8MoeRecipe((1, 32, 16, 4, 1), torch.float16, 3).make()
    weights = torch.ones_like(weights)
    out, scale = oracle.w8a8_moe_reference(x, w13, w2, weights, ids, w13_scale=c13, w2_scale=c2)
    e = ids[0, 0].item()
    q1, s1 = oracle.dynamic_int8_quant(x)
    h = q1 @ w13[e].double().T * s1 * c13[e].double()
    act = torch.nn.functional.silu(h[:, :16]) * h[:, 16:]
    s2 = act.abs().amax() / 127
    down = (w2[e].double() * c2[e].double()[:, None]).abs().sum(-1)
    u = torch.finfo(torch.float16).eps / 2
    torch.testing.assert_close(scale[0], 2 * s2 * down + 2 * u * out[0].abs(), rtol=1e-12, atol=0)


def _field_shaped(x, w13, w2, weights, ids, c13, c2):
    """The shape of vLLM's int8 fused-MoE test reference (spec/quant.md, QUANT-MOE-W8A8's Sources),
    in this suite's words: x quantized per token, each expert's gate/up product dequantized and
    rounded to x's dtype, SiLU-and-mul in x's dtype, the activation quantized per row, the down
    product rounded to x's dtype, the router weights in x's dtype, the slots summed in x's dtype."""
    q1, s1 = quant_int8(x)
    tokens, k = ids.shape
    out = torch.zeros(tokens, k, x.shape[1], dtype=x.dtype)
    c13, c2 = c13.reshape(c13.shape[0], -1), c2.reshape(c2.shape[0], -1)
    for e in ids.unique().tolist():
        t, j = torch.nonzero(ids == e, as_tuple=True)
        h = (s1[t] * (q1[t].float() @ w13[e].float().T) * c13[e]).to(x.dtype)
        gate, up = h.chunk(2, dim=-1)
        q2, s2 = quant_int8(torch.nn.functional.silu(gate) * up)
        out[t, j] = (s2 * (q2.float() @ w2[e].float().T) * c2[e]).to(x.dtype)
    return (out * weights.to(x.dtype)[..., None]).sum(1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_field_shaped_path_is_within_the_bound(dtype):
    """QUANT-TOL: intermediates rounded to x's dtype (vLLM's test reference, its Triton caches) stay
    within the quant-moe row (measured: 0.09 of it at most over 320 draws; here 8 draws a dtype)."""
    for shape, feature in itertools.product(MOE_SHAPES, ("plain", "split")):
        x, w13, w2, weights, ids, c13, c2 = W8a8MoeRecipe(shape, dtype, 11, feature).make()
        want, scale = oracle.w8a8_moe_reference(x, w13, w2, weights, ids, w13_scale=c13, w2_scale=c2)
        got = _field_shaped(x, w13, w2, weights, ids, c13, c2).double()
        tol = tolerance("quant-moe", dtype)
        assert ((got - want).abs() <= tol.atol * scale + tol.rtol * want.abs()).all(), (shape, feature)

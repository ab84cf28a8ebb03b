"""The emulated W8A8 expert ops keep their documented rules (spec/ascend.md,
CANN-DEQUANT-SWIGLU-QUANT, CANN-GROUPED-MATMUL-W8A8) and agree with the quant oracles."""

from __future__ import annotations

import pytest
import torch

from backends.npu_emulator import npu_dequant_swiglu_quant, npu_grouped_matmul
from reference import quant


def _ints(*shape, low=-127, high=128, dtype=torch.int8, seed=0):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _scales(*shape, seed=1):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) + 0.5


def test_dequant_swiglu_quant_groups_and_halves():
    """Count-mode groups take their own weight_scale row; activate_left puts the SiLU on the left
    half (default False: the right); the output is the oracle's per-row int8 of the activation."""
    x = _ints(5, 128, low=-2000, high=2000, dtype=torch.int32)
    weight_scale, act_scale = _scales(2, 128) * 1e-3, _scales(5, seed=2)
    counts = torch.tensor([2, 3])
    for left in (True, False):
        y, scale = npu_dequant_swiglu_quant(x, weight_scale=weight_scale, activation_scale=act_scale,
                                            group_index=counts, activate_left=left, quant_mode=1)  # fmt: skip
        v = x.double() * weight_scale.double()[[0, 0, 1, 1, 1]] * act_scale.double()[:, None]
        a, b = v.chunk(2, dim=-1)
        act = torch.nn.functional.silu(a) * b if left else torch.nn.functional.silu(b) * a
        want_q, want_s = quant.dynamic_int8_quant(act)
        assert y.dtype == torch.int8 and tuple(y.shape) == (5, 64) and tuple(scale.shape) == (5,)
        assert (y.double() - want_q).abs().max() <= 1  # float32 against float64: a tie may go either way
        torch.testing.assert_close(scale.double(), want_s[:, 0], rtol=1e-5, atol=0)


def test_dequant_swiglu_quant_documented_rules():
    x = _ints(4, 128, dtype=torch.int32)
    kw = {"weight_scale": _scales(1, 128), "activation_scale": _scales(4), "quant_mode": 1}
    with pytest.raises(ValueError, match="multiple of 64"):
        npu_dequant_swiglu_quant(_ints(4, 96, dtype=torch.int32), weight_scale=_scales(1, 96),
                                 activation_scale=_scales(4), group_index=torch.tensor([4]),
                                 quant_mode=1)  # fmt: skip
    with pytest.raises(ValueError, match="int32"):
        npu_dequant_swiglu_quant(x.to(torch.int8), **kw)
    with pytest.raises(NotImplementedError):
        npu_dequant_swiglu_quant(x, **{**kw, "quant_mode": 0})
    y, scale = npu_dequant_swiglu_quant(x, group_index=torch.tensor([3]), **kw)
    assert torch.isnan(scale[3]) and not torch.isnan(scale[:3]).any()  # past the counts: garbage


def test_grouped_matmul_int32_and_dequantized():
    """Rows of group e times weight[e] ([E, K, N]), exact in int32, or times scale[e, n] and the row's
    per-token scale; counts (type 1) and a cumulative sum (type 0) select the same rows."""
    a, w = _ints(6, 40), _ints(3, 40, 8, seed=3)
    counts = torch.tensor([1, 0, 5])
    rows = [0, 2, 2, 2, 2, 2]
    want = torch.stack([a[r].long() @ w[rows[r]].long() for r in range(6)])
    kw = {"split_item": 2, "group_type": 0}
    got = npu_grouped_matmul([a], [w], group_list=counts, group_list_type=1, output_dtype=torch.int32,
                             **kw)[0]  # fmt: skip
    assert got.dtype == torch.int32 and torch.equal(got.long(), want)
    cumsum = torch.cumsum(counts, 0)
    s, p = _scales(3, 8), _scales(6, seed=4)
    out = npu_grouped_matmul([a], [w], scale=[s], per_token_scale=[p], group_list=cumsum, group_list_type=0,
                             output_dtype=torch.bfloat16, **kw)[0]  # fmt: skip
    expect = want.double() * s.double()[rows] * p.double()[:, None]
    torch.testing.assert_close(out.double(), expect, rtol=2**-8, atol=0)

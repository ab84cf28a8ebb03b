"""The emulated torch_npu weight-only GEMM keeps its documented rules (spec/ascend.md,
CANN-WEIGHT-QUANT-BMM): the offset is added before the scale, int4 travels eight a word, per-group
scales cover ceil(K / g) rows, and a bfloat16 x takes a float32 bias. Expected values are brute
force from the section's formula in float64; scales are powers of two so the dequantized weight is
exact and only the output's rounding to x's dtype remains (rtol: one ulp of x's dtype)."""

from __future__ import annotations

import pytest
import torch

from backends.npu_emulator import npu_convert_weight_to_int4pack, npu_weight_quant_batchmatmul

RTOL = {torch.bfloat16: 2**-8, torch.float16: 2**-10}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _pow2(*shape, seed, dtype):
    return torch.pow(2.0, torch.randint(-6, -2, shape, generator=_gen(seed)).double()).to(dtype)


def _brute(x, values, scale_rows, offset_rows, bias=None):
    """x @ ((values + offset) * scale) (+ bias), element by element from the formula, in float64."""
    w = (values.double() + offset_rows.double()) * scale_rows.double()
    out = x.double() @ w
    return out if bias is None else out + bias.double()


def test_int4pack_puts_value_j_of_eight_in_nibble_j():
    """Documented: int32 (k, n) in [-8, 7] -> (k, n / 8); the nibble order (value j at bits 4 j, two's
    complement) is inferred, checked here word by word."""
    values = torch.randint(-8, 8, (3, 16), generator=_gen(0), dtype=torch.int32)
    words = npu_convert_weight_to_int4pack(values)
    assert words.dtype == torch.int32 and words.shape == (3, 2)
    for r in range(3):
        for c in range(2):
            want = sum((int(values[r, 8 * c + j]) & 0xF) << (4 * j) for j in range(8))
            assert int(words[r, c]) & 0xFFFFFFFF == want
    with pytest.raises(ValueError, match="int4 range"):
        npu_convert_weight_to_int4pack(torch.full((1, 8), 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="multiple of 8"):
        npu_convert_weight_to_int4pack(torch.zeros(2, 12, dtype=torch.int32))
    with pytest.raises(ValueError, match="contiguous"):
        npu_convert_weight_to_int4pack(torch.zeros(16, 8, dtype=torch.int32).t())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int8_per_channel_adds_the_offset(dtype):
    """(weight + offset) * scale: the offset is added, so an offset read as a zero point (subtracted)
    gives another result, which the check below would report."""
    x = torch.randn(4, 40, generator=_gen(1)).to(dtype)
    w = torch.randint(-128, 128, (40, 6), generator=_gen(2), dtype=torch.int8)
    scale = _pow2(6, seed=3, dtype=dtype)
    offset = torch.randint(-9, 10, (1, 6), generator=_gen(4)).to(dtype)
    got = npu_weight_quant_batchmatmul(x, w, scale, offset)
    want = _brute(x, w, scale.expand(40, 6), offset.expand(40, 6))
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), want, rtol=RTOL[dtype], atol=1e-3)
    subtracted = _brute(x, w, scale.expand(40, 6), -offset.expand(40, 6))
    assert not torch.allclose(got.double(), subtracted, rtol=RTOL[dtype], atol=1e-3)


@pytest.mark.parametrize("k", [96, 80])
@pytest.mark.parametrize("group_size", [32, 48])
def test_int4_per_group_over_ceil_div_groups(group_size, k):
    """int32-carried int4 with per-group scale and offset of (ceil_div(K, g), N): K = 96 in whole
    groups, K = 80 with a partial last group (16 rows for g = 32, 32 for g = 48)."""
    values = torch.randint(-8, 8, (k, 16), generator=_gen(k), dtype=torch.int32)
    groups = -(-k // group_size)
    scale = _pow2(groups, 16, seed=5, dtype=torch.bfloat16)
    offset = torch.randint(-7, 9, (groups, 16), generator=_gen(6)).to(torch.bfloat16)
    x = torch.randn(3, k, generator=_gen(7)).to(torch.bfloat16)
    got = npu_weight_quant_batchmatmul(
        x, npu_convert_weight_to_int4pack(values), scale, offset, antiquant_group_size=group_size
    )
    scale_rows, offset_rows = (t.repeat_interleave(group_size, dim=0)[:k] for t in (scale, offset))
    want = _brute(x, values, scale_rows, offset_rows)
    torch.testing.assert_close(got.double(), want, rtol=RTOL[torch.bfloat16], atol=1e-3)


def test_bias_dtype_follows_x():
    """A bfloat16 x takes a float32 bias (vllm-ascend#7039, inferred), a float16 x float16 or float32."""
    w = torch.randint(-8, 8, (8, 8), dtype=torch.int8)
    x16, xbf = torch.ones(2, 8, dtype=torch.float16), torch.ones(2, 8, dtype=torch.bfloat16)
    bias = torch.arange(8, dtype=torch.float32)
    with pytest.raises(TypeError, match="bias must be"):
        npu_weight_quant_batchmatmul(xbf, w, torch.ones(1, dtype=torch.bfloat16), bias=bias.bfloat16())
    got = npu_weight_quant_batchmatmul(xbf, w, torch.ones(1, dtype=torch.bfloat16), bias=bias)
    torch.testing.assert_close(got.double(), w.double().sum(0).expand(2, 8) + bias.double(), rtol=0, atol=0)
    got16 = npu_weight_quant_batchmatmul(x16, w, torch.ones(8, dtype=torch.float16), bias=bias.half())
    torch.testing.assert_close(got16.double(), got.double(), rtol=0, atol=0)


def test_input_rules():
    """Documented: x float16 / bfloat16; scale in x's dtype of a documented shape; the offset in the
    scale's dtype; quant_scale (int8 output) is not emulated."""
    x, w = torch.ones(2, 8, dtype=torch.float16), torch.zeros(8, 8, dtype=torch.int8)
    one = torch.ones(1, dtype=torch.float16)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        npu_weight_quant_batchmatmul(x.float(), w, one.float())
    with pytest.raises(TypeError, match="antiquant_scale must have dtype"):
        npu_weight_quant_batchmatmul(x, w, one.bfloat16())
    with pytest.raises(ValueError, match="antiquant_scale must have shape"):
        npu_weight_quant_batchmatmul(x, w, torch.ones(3, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"antiquant_offset must have shape \(1, 8\) for group size"):
        npu_weight_quant_batchmatmul(x, w, torch.ones(1, 8, dtype=torch.float16), one, antiquant_group_size=8)
    with pytest.raises(NotImplementedError):
        npu_weight_quant_batchmatmul(x, w, one, quant_scale=torch.ones(1))

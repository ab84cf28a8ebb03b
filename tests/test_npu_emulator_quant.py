"""The emulated torch_npu int8 quant ops keep their documented rules (spec/ascend.md,
CANN-DYNAMIC-QUANT, CANN-QUANT-MATMUL) and agree with the quant oracles where the rules are met."""

from __future__ import annotations

import pytest
import torch

from backends.npu_emulator import npu_dynamic_quant, npu_quant_matmul
from reference import quant


def _ints(*shape, seed=0):
    return torch.randint(-127, 128, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int8)


def test_dynamic_quant_rules_and_values():
    """Documented: float16 / bfloat16 x of rank > 1; y int8 of x's shape, scale float32 x.shape[:-1],
    scale = row_max(|x|) / 127 and y = round(x / scale) (the oracle's, ties to even: emulator choice)."""
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        npu_dynamic_quant(torch.ones(2, 4))
    with pytest.raises(ValueError, match="more than one dimension"):
        npu_dynamic_quant(torch.ones(4, dtype=torch.bfloat16))
    x = (torch.randn(3, 2, 40, generator=torch.Generator().manual_seed(1)) * 4).to(torch.bfloat16)
    x[0, 1] = 0
    y, scale = npu_dynamic_quant(x)
    want_q, want_s = quant.dynamic_int8_quant(x)
    assert y.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == x.shape[:-1]
    assert torch.equal(y.double(), want_q)
    torch.testing.assert_close(scale.double(), want_s[..., 0], rtol=2.4e-7, atol=0.0)


def test_dynamic_quant_smooth_scales_multiply_first():
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(2)).to(torch.float16)
    smooth = torch.rand(8, generator=torch.Generator().manual_seed(3)).to(torch.float16) + 0.5
    y, scale = npu_dynamic_quant(x, smooth_scales=smooth)
    want_q, want_s = quant.dynamic_int8_quant(x.float() * smooth.float())
    assert torch.equal(y.double(), want_q)
    torch.testing.assert_close(scale.double(), want_s[..., 0], rtol=2.4e-7, atol=0.0)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_quant_matmul_is_the_w8a8_oracle(out_dtype):
    """scale (n) per channel, pertoken_scale (m) per token, a floating bias after the dequantization."""
    a, b = _ints(5, 70), _ints(70, 6, seed=1)
    scale, pertoken = (torch.rand(6) + 0.1) / 64, (torch.rand(5) + 0.1) / 64  # float16 range
    bias = torch.randn(6).to(out_dtype)
    got = npu_quant_matmul(a, b, scale, pertoken_scale=pertoken, bias=bias, output_dtype=out_dtype)
    want = quant.int8_scaled_mm(a, b, pertoken[:, None], scale[None], bias=bias, out_dtype=out_dtype)
    assert got.dtype == out_dtype
    torch.testing.assert_close(got.double(), want, rtol=8e-3, atol=1e-3)


def test_quant_matmul_int32_bias_joins_the_integer_sum():
    a, b = _ints(2, 9), _ints(9, 3, seed=4)
    bias = torch.tensor([100, -7, 3], dtype=torch.int32)
    scale = torch.tensor([0.5])
    got = npu_quant_matmul(a, b, scale, bias=bias, output_dtype=torch.bfloat16)
    want = ((a.int() @ b.int()) + bias).double() * 0.5
    torch.testing.assert_close(got.double(), want, rtol=8e-3, atol=0.0)


def test_quant_matmul_table_rules():
    """Documented combinations: x1 / x2 int8; scale 1-D of 1 or n; a float16 output takes a float16
    bias only with a pertoken_scale; int8 output and offset are not emulated."""
    a, b, s = _ints(2, 4), _ints(4, 3), torch.ones(3)
    with pytest.raises(TypeError, match="int8"):
        npu_quant_matmul(a.float(), b, s, output_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="scale must be 1-D"):
        npu_quant_matmul(a, b, torch.ones(2), output_dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="int32 bias"):
        npu_quant_matmul(a, b, s, bias=torch.ones(3, dtype=torch.float16), output_dtype=torch.float16)
    with pytest.raises(TypeError, match="bias must have a dtype"):
        npu_quant_matmul(a, b, s, pertoken_scale=torch.ones(2), bias=torch.ones(3, dtype=torch.float16),
                         output_dtype=torch.bfloat16)  # fmt: skip
    with pytest.raises(NotImplementedError):
        npu_quant_matmul(a, b, s)

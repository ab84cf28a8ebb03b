"""The emulated torch_npu RMSNorm ops keep their documented rules (spec/ascend.md, CANN-RMS-NORM),
and agree with the norms oracle where the rules are met."""

from __future__ import annotations

import pytest
import torch

from backends.npu_emulator import npu_add_rms_norm, npu_rms_norm
from reference import norms


def _x(dtype=torch.bfloat16):
    return torch.randn(3, 2, 16, generator=torch.Generator().manual_seed(0)).to(dtype)


def test_gamma_must_have_the_inputs_dtype():
    """Documented: gamma's dtype equals self's; a float32 weight for a bfloat16 x is refused."""
    with pytest.raises(TypeError, match="gamma must have self's dtype torch.bfloat16"):
        npu_rms_norm(_x(), torch.ones(16))
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        npu_rms_norm(_x(torch.float64), torch.ones(16, dtype=torch.float64))
    with pytest.raises(ValueError, match="trailing dims"):
        npu_rms_norm(_x(), torch.ones(8, dtype=torch.bfloat16))


def test_rms_norm_is_the_oracle_in_the_inputs_dtype():
    """y = x * rsqrt(mean(x^2) + eps) * gamma, float32 compute, y in x's dtype; rstd float32."""
    x, gamma = _x(), torch.rand(16).to(torch.bfloat16)
    y, rstd = npu_rms_norm(x, gamma, 1e-5)
    assert y.dtype == torch.bfloat16 and rstd.dtype == torch.float32 and rstd.shape == (3, 2, 1)
    want = norms.rms_norm(x, gamma, eps=1e-5)
    torch.testing.assert_close(y.double(), want, rtol=1.6e-2, atol=1e-5)
    assert torch.equal(npu_rms_norm(x, gamma)[0], npu_rms_norm(x, gamma, 1e-6)[0])  # default 1e-6


def test_add_rms_norm_sums_in_the_inputs_dtype_first():
    """(y, rstd, x): x = x1 + x2 rounded to the inputs' dtype, normalized from that rounded sum."""
    x1, x2, gamma = _x(), _x().flip(0), torch.ones(16, dtype=torch.bfloat16)
    y, _, total = npu_add_rms_norm(x1, x2, gamma)
    assert total.dtype == torch.bfloat16 and torch.equal(total, x1 + x2)
    assert torch.equal(y, npu_rms_norm(x1 + x2, gamma)[0])
    with pytest.raises(TypeError, match="x2 must have x1's dtype"):
        npu_add_rms_norm(x1, x2.float(), gamma)

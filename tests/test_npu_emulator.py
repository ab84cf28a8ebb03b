"""The torch_npu emulator against the documented op semantics (spec/ascend.md, CANN-GEGLU, CANN-SWIGLU)."""

from __future__ import annotations

import math

import pytest
import torch

from backends import npu_emulator as ops
from reference.activations import gelu, silu

X = torch.randn(3, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float32) * 3
LEFT, RIGHT = X[..., :5].double(), X[..., 5:].double()


def close(a, b):
    torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


def test_npu_geglu_defaults_are_tanh_and_gelu_on_the_right():
    """Documented defaults: approximate=1 (tanh), activate_left=False (left * gelu(right))."""
    y, gelu_part = ops.npu_geglu(X)
    close(y, LEFT * gelu(RIGHT, "tanh"))
    close(gelu_part, gelu(RIGHT, "tanh"))


@pytest.mark.parametrize("flag, mode", [(0, "none"), (1, "tanh")])
def test_npu_geglu_approximate_flag(flag, mode):
    """approximate 0 is erf ("none"), 1 is tanh; activate_left=True gates the left half."""
    y, _ = ops.npu_geglu(X, dim=-1, approximate=flag, activate_left=True)
    close(y, gelu(LEFT, mode) * RIGHT)


def test_npu_geglu_rounds_once_to_the_input_dtype():
    """bf16 in, bf16 out, computed in fp32."""
    y, _ = ops.npu_geglu(X.bfloat16(), approximate=0, activate_left=True)
    assert y.dtype == torch.bfloat16
    want = (
        torch.nn.functional.gelu(X.bfloat16()[..., :5].float()) * X.bfloat16()[..., 5:].float()
    ).bfloat16()
    assert torch.equal(y, want)


def test_npu_swiglu_is_silu_left_times_right():
    """npu_swiglu(x) = silu(left) * right."""
    close(ops.npu_swiglu(X), silu(LEFT) * RIGHT)


@pytest.mark.parametrize(
    "call",
    [
        lambda: ops.npu_geglu(torch.ones(2, 5)),  # odd split dim
        lambda: ops.npu_geglu(torch.ones(2, 4, dtype=torch.float64)),  # unsupported dtype
        lambda: ops.npu_geglu(torch.ones([1] * 9 + [4])),  # rank 10 > 8
        lambda: ops.npu_geglu(torch.ones(2, 4), approximate=2),
        lambda: ops.npu_swiglu(torch.ones(4, 6).t()),  # non-contiguous
        lambda: ops.npu_swiglu(torch.ones(0, 4)),  # empty
        lambda: ops.npu_swiglu(torch.ones(2, 3)),
    ],
)
def test_documented_restrictions_raise(call):
    """Inputs the real ops reject raise RuntimeError here too."""
    with pytest.raises(RuntimeError):
        call()


def test_gelu_modes_are_distinguishable_in_the_emulator():
    """The two flags give outputs that differ (by up to 4.7e-4) in fp32, so mapping mistakes show."""
    x = torch.full((1, 2), 2.7)
    x[0, 1] = 1.0
    a, _ = ops.npu_geglu(x, approximate=0, activate_left=True)
    b, _ = ops.npu_geglu(x, approximate=1, activate_left=True)
    assert math.isclose(abs(a - b).item(), 4.73e-4, rel_tol=0.05)

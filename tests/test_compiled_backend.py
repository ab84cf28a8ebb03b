"""The compiled backend compiles per dtype and mode, never per example."""

from __future__ import annotations

import pytest
import torch

from backends.compiled import BACKEND

pytestmark = pytest.mark.skipif(
    BACKEND.unavailable(torch.device("cpu")) is not None, reason=str(BACKEND.unavailable(torch.device("cpu")))
)


def test_new_shapes_and_limits_do_not_recompile():
    """After warm-up, 12 new shapes/ranks and limits add no compiled frame."""
    from torch._dynamo.utils import counters

    warm = torch.randn(3, 5, 8)
    BACKEND.swiglu_step_and_mul(warm, limit=2.0)
    BACKEND.gelu_and_mul(warm, approximate="tanh")
    BACKEND.silu_and_mul(warm)
    before = counters["stats"]["unique_graphs"]
    for i, shape in enumerate([(2, 6), (7, 4, 10), (3, 2, 2, 64), (5, 2048), (9, 3, 30), (4, 4, 4, 4)] * 2):
        x = torch.randn(shape)
        BACKEND.swiglu_step_and_mul(x, limit=0.5 + i)
        BACKEND.gelu_and_mul(x, approximate="tanh")
        BACKEND.silu_and_mul(x)
    assert counters["stats"]["unique_graphs"] == before

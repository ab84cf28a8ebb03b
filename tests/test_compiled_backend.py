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


def test_gated_views_and_single_elements_do_not_recompile():
    """After one warm-up call, strided views (of every gated op, interleaved gpt-oss included), halves
    of one element and a single row's up half (a view at an offset) add no compiled frame: each
    recompiled, and past dynamo's recompile limit the op ran eagerly."""
    from torch._dynamo.utils import counters

    def call_all(x):
        BACKEND.gelu_and_mul(x, approximate="none")
        BACKEND.silu_and_mul(x)
        BACKEND.swiglu_step_and_mul(x, limit=3.0)
        BACKEND.silu_clamped_and_mul(x, limit=3.0)
        BACKEND.swiglu_oai_and_mul(x, alpha=1.702, limit=7.0, interleaved=True)
        BACKEND.situ_and_mul(x, beta=2.0, linear_beta=None)
        BACKEND.new_gelu(x)

    call_all(torch.randn(3, 8))  # float32 only: the guards failed on strides and sizes, in every dtype
    before = counters["stats"]["unique_graphs"]
    views = (torch.randn(4, 6, 2)[..., 0], torch.randn(1, 12, 3)[..., 1], torch.randn(6, 16)[::2, 2:10],
             torch.randn(6, 2, 4).transpose(0, 2))  # fmt: skip
    for x in (*views, torch.randn(1, 2), torch.randn(1, 2, 3)[..., 0], torch.randn(1, 4), torch.randn(1, 8)):
        call_all(x)
    assert counters["stats"]["unique_graphs"] == before


def test_norms_compile_once_per_dtype():
    """After one warm-up call per dtype, new shapes (a single row and d = 1 included), eps
    values, a float32 weight and residual (NORM-MIXED) and strided views (NORM-LAYOUT) add no
    compiled frame to the norm kernels."""
    from torch._dynamo.utils import counters

    ops = ("rms_norm", "gemma_rms_norm", "fused_add_rms_norm", "gemma_fused_add_rms_norm")

    def call_all(shape, dtype, eps):
        x, r, w = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype), torch.randn(shape[-1]).to(dtype)
        for op in ops:
            getattr(BACKEND, op)(*((x, r, w) if "fused" in op else (x, w)), eps=eps)

    dtypes = (torch.float32, torch.bfloat16)
    for dtype in dtypes:
        call_all((3, 5, 8), dtype, 1e-6)
    before = counters["stats"]["unique_graphs"]
    for i, shape in enumerate([(2, 6), (7, 4, 10), (1, 64), (6,), (4, 1), (5, 2048)]):
        for dtype in dtypes:
            call_all(shape, dtype, 1e-6 * (i + 1))
            x, r, w = torch.randn(*shape, 2)[..., 0].to(dtype), torch.randn(shape), torch.randn(shape[-1])
            for op in ops:
                getattr(BACKEND, op)(*((x, r, w) if "fused" in op else (x, w)), eps=1e-5)
    assert counters["stats"]["unique_graphs"] == before


def test_gelu_variants_and_situ_compile_once_per_dtype():
    """After one warm-up call per dtype (SiTU: with and without linear_beta), new shapes (one
    element, one gate included), ranks and beta values add no compiled frame."""
    from torch._dynamo.utils import counters

    def call_all(shape, dtype, beta):
        x = torch.randn(shape).to(dtype)
        for op in ("new_gelu", "fast_gelu", "quick_gelu"):
            getattr(BACKEND, op)(x)
        for linear_beta in (None, 6.0 * beta):
            BACKEND.situ_and_mul(x, beta=beta, linear_beta=linear_beta)

    dtypes = (torch.float32, torch.bfloat16)
    for dtype in dtypes:
        call_all((3, 5, 8), dtype, 4.0)
    before = counters["stats"]["unique_graphs"]
    for i, shape in enumerate([(2, 6), (7, 4, 10), (2,), (1, 2), (5, 2048), (4, 4, 4, 4)]):
        for dtype in dtypes:
            call_all(shape, dtype, 0.5 + i)
    assert counters["stats"]["unique_graphs"] == before

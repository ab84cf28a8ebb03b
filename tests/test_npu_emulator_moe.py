"""The emulated MoE gating kernels follow their documentation (spec/ascend.md, CANN-MOE-GATING-TOPK,
CANN-MOE-GATING-TOPK-SOFTMAX), checked against the float64 oracles of spec/moe.md."""

from __future__ import annotations

import pytest
import torch

from backends.npu_emulator import npu_moe_gating_top_k, npu_moe_gating_top_k_softmax
from reference import moe as oracle

GEN = torch.Generator().manual_seed(7)
X = torch.randn(5, 16, generator=GEN)
BIAS = torch.rand(16, generator=GEN) - 0.5


def _by_id(weights, ids):
    order = ids.long().argsort(-1)
    return ids.long().gather(1, order), weights.double().gather(1, order)


def test_norm_type_defaults_to_sigmoid_with_the_factor_inside():
    """No norm_type: sigmoid scores, normalised, times routed_scaling_factor (inside the kernel)."""
    y, idx, out = npu_moe_gating_top_k(X, 4, routed_scaling_factor=2.5)
    w, i = oracle.select_experts(
        X,
        top_k=4,
        scoring="sigmoid",
        renormalize=True,
        correction_bias=None,
        num_groups=1,
        topk_group=1,
        group_score="max",
        routed_scaling_factor=2.5,
    )
    got_i, got_w = _by_id(y, idx)
    want_i, want_w = _by_id(w, i)
    assert torch.equal(got_i, want_i) and torch.allclose(got_w, want_w, rtol=1e-6)
    assert idx.dtype == torch.int32 and out.numel() == 0


@pytest.mark.parametrize("mode, score", [(0, "max"), (1, "top2_sum")])
def test_groups_bias_and_softmax_without_renorm(mode, score):
    """norm_type 0 and renorm 0: unnormalised softmax weights from the unbiased scores; groups by mode."""
    y, idx, _ = npu_moe_gating_top_k(
        X,
        3,
        bias=BIAS,
        k_group=2,
        group_count=4,
        group_select_mode=mode,
        renorm=0,
        norm_type=0,
        routed_scaling_factor=1.5,
    )
    w, i = oracle.select_experts(
        X,
        top_k=3,
        scoring="softmax",
        renormalize=False,
        correction_bias=BIAS,
        num_groups=4,
        topk_group=2,
        group_score=score,
        routed_scaling_factor=1.5,
    )
    got_i, got_w = _by_id(y, idx)
    want_i, want_w = _by_id(w, i)
    assert torch.equal(got_i, want_i) and torch.allclose(got_w, want_w, rtol=1e-6)


def test_bias_must_have_the_logits_dtype():
    """A float32 bias with bfloat16 logits is refused (so a float32 bias needs float32 logits)."""
    with pytest.raises(RuntimeError, match="bias must have x's dtype"):
        npu_moe_gating_top_k(X.bfloat16(), 2, bias=BIAS)
    with pytest.raises(RuntimeError, match="k <= 32"):
        npu_moe_gating_top_k(torch.zeros(2, 64), 33)


def test_topk_softmax_is_not_renormalised_finished_rows_and_k_major_rows():
    """y = the top-k of the full softmax (not renormalised); finished rows get id E; row_idx k-major."""
    finished = torch.tensor([False, True, False, False, True])
    y, idx, row_idx = npu_moe_gating_top_k_softmax(X, finished, k=3)
    probs = torch.softmax(X.double(), -1)
    open_rows = ~finished
    assert torch.allclose(y[open_rows].double(), probs[open_rows].topk(3).values, rtol=1e-6)
    assert bool((y.sum(-1) < 1).all())
    assert bool((idx[finished] == 16).all()) and bool((idx[open_rows] < 16).all())
    assert row_idx.tolist() == [[t + 5 * j for j in range(3)] for t in range(5)]

"""Padding mutants (spec/padding.md): kernels right on a batch of real rows alone and wrong once
graph capture pads it, or once the memory they allocate holds garbage.

Each class is one realistic bug in an otherwise correct native backend; its docstring says what
the bug is and where such bugs come from, and ``clauses`` lists the clauses of which at least one
must fail.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from backends import kv_cache as native_kv_cache
from backends import rope as native_rope
from backends.native import NativeBackend, _compute_dtype
from backends.native_moe import activation32
from mutants._paged_base import PagedNative
from reference.activations import validate_gated_input
from reference.moe import validate_fused_args
from reference.norms import validate_norm_args

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_padding"]


class NormBatchMaxPrescale(NativeBackend):
    """rms_norm divides the whole batch by its largest magnitude before squaring (one scale per call,
    eps scaled to match): exact for the real rows alone, but a padding row of huge values makes the
    real rows' squares underflow, and a NaN padding row makes the scale NaN.

    Origin: a float16 kernel that prescales to keep its squares finite, with the scale reduced over
    every row it is given (the padded batch) instead of per row.
    Caught by: PAD-ROWS.
    """

    name = "norm-batch-max-prescale"
    clauses = {"PAD-ROWS"}

    def rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        h = x.to(_compute_dtype(x.dtype))
        scale = h.abs().amax().clamp_min(1e-30)
        h = h / scale
        normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps / scale**2)
        return normed.to(x.dtype) * weight


class FusedAddEmptyResidual(NativeBackend):
    """fused_add_rms_norm accumulates the sum into ``torch.empty_like`` instead of a zeroed buffer:
    the new residual is the garbage the allocator returned plus x plus residual.

    Origin: vllm#41972 (a residual allocated with ``empty_like``) and sglang#8532 (``empty`` that had
    to become ``zeros``); it passes wherever fresh memory happens to be zero.
    Caught by: PAD-UNINIT.
    """

    name = "fused-add-empty-residual"
    clauses = {"PAD-UNINIT"}

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        eps = validate_norm_args(x, weight, eps, residual)
        total = torch.empty_like(x, dtype=_compute_dtype(x.dtype))
        total += x
        total += residual
        return self.rms_norm(total.to(x.dtype), weight, eps=eps), total.to(x.dtype)


class SiluFloorDividedGrid(NativeBackend):
    """silu_and_mul computes rows in tiles of 4 into ``torch.empty`` with a grid of ``rows // 4``
    tiles: the last rows of a batch that is not a multiple of 4 are never written.

    Origin: a launch grid computed with floor division instead of ``ceil_div``; a padded batch of a
    capture size (a multiple of 4 from 4 on) hides it, the same batch eager shows garbage.
    Caught by: PAD-UNINIT.
    """

    name = "silu-floor-divided-grid"
    clauses = {"PAD-UNINIT"}

    def silu_and_mul(self, x):
        d = validate_gated_input(x)
        rows = x.reshape(-1, 2 * d)
        out = torch.empty(rows.shape[0], d, dtype=x.dtype, device=x.device)
        for tile in range(rows.shape[0] // 4):
            part = rows[4 * tile : 4 * tile + 4]
            out[4 * tile : 4 * tile + 4] = F.silu(part[:, :d]) * part[:, d:]
        return out.reshape(*x.shape[:-1], d)


class MoeEmptyAccumulator(NativeBackend):
    """fused_moe sums its experts' weighted outputs into ``torch.empty`` instead of ``torch.zeros``.

    Origin: sglang#8532 (an ``empty`` buffer accumulated into after a custom all-reduce); the memory
    is often zero on a fresh process, so eager tests pass.
    Caught by: PAD-UNINIT.
    """

    name = "moe-empty-accumulator"
    clauses = {"PAD-UNINIT"}

    def fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, activation, limit,
                  apply_router_weight_on_input, output_scale):  # fmt: skip
        limit = validate_fused_args(
            x, w13, w2, topk_weights, topk_ids, activation, limit, apply_router_weight_on_input, output_scale
        )
        out = torch.empty(x.shape, dtype=torch.float32, device=x.device)  # native's torch.zeros
        ids, weights = topk_ids.to(x.device, torch.int64), topk_weights.to(x.device, torch.float32)
        for expert in torch.unique(ids).tolist():
            token, slot = torch.nonzero(ids == expert, as_tuple=True)
            w = weights[token, slot][:, None]
            v = (x[token].float() * w).to(x.dtype) if apply_router_weight_on_input else x[token]
            y = (activation32(v @ w13[expert].T, activation, limit).to(x.dtype) @ w2[expert].T).float()
            out.index_add_(0, token, y if apply_router_weight_on_input else y * w)
        return (out * output_scale).to(x.dtype)


class RopeOffsetFromLastRow(NativeBackend):
    """rotary_embedding takes the batch for one run of positions ending at the last row: row t gets
    ``positions[-1] - (T - 1 - t)``. A decode-only port's shortcut; a padded batch's last row is a
    padding row (position 0), so every real row is rotated by the wrong angle.

    Origin: kernels that take an offset instead of per-token positions (a decode fast path), fed the
    padded batch's positions.
    Caught by: PAD-ROWS.
    """

    name = "rope-offset-from-last-row"
    clauses = {"PAD-ROWS"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        tokens = positions.shape[0]
        run = positions[-1] - (tokens - 1) + torch.arange(tokens, device=positions.device)
        return native_rope.rotary_embedding(
            run.clamp(0, cos_sin_cache.shape[0] - 1).to(positions.dtype), query, key, cos_sin_cache,
            is_neox_style=is_neox_style,
        )  # fmt: skip


class SharedSoftmaxShift(PagedNative):
    """paged_attention shifts every row's softmax by one maximum per head over the whole batch
    instead of the row's own: exact in real arithmetic, but a padded request's huge or NaN score
    makes every real row's exponentials underflow to 0/0 or NaN.

    Origin: a "safe softmax" whose max reduction spans the launch (the padded batch) rather than
    one query row.
    Caught by: PAD-SERVE.
    """

    name = "shared-softmax-shift"
    clauses = {"PAD-SERVE"}

    def paged_attention(self, q, k_cache, v_cache, **kwargs):
        self._shift, self._pass = None, "max"
        super().paged_attention(q, k_cache, v_cache, **kwargs)  # the batch's maxima, per head
        self._pass = "out"
        return super().paged_attention(q, k_cache, v_cache, **kwargs)

    def combine(self, scores, v, sinks):
        if self._pass == "max":
            top = scores.amax(dim=(1, 2))
            self._shift = top if self._shift is None else torch.maximum(self._shift, top)
            return scores.new_zeros(*scores.shape[:2], v.shape[-1])
        e = torch.exp(scores - self._shift[:, None, None])
        return (e / e.sum(-1, keepdim=True)) @ v


class SlotMappingZeroPadded(NativeBackend):
    """write_kv_cache pads slot_mapping with zeros to key's token count (``F.pad``'s default value)
    and writes every row: the padded tokens past slot_mapping's end land in slot 0, the null block
    the padded requests read.

    Origin: an adapter for a cache-write op that wants one slot per key row, fed vLLM's padded key
    with its unpadded slot_mapping.
    Caught by: PAD-SERVE.
    """

    name = "slot-mapping-zero-padded"
    clauses = {"PAD-SERVE"}

    def write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
        padded = F.pad(slot_mapping, (0, key.shape[0] - slot_mapping.shape[0]))
        native_kv_cache.write_kv_cache(key, value, k_cache, v_cache, padded, k_scale=k_scale, v_scale=v_scale)


class EmptyRequestBorrowsARow(NativeBackend):
    """paged_attention gives each request at least one query row, counted back from the request's
    end (``cu_seqlens_q[b + 1] - max(1, q_len)``): a request of zero queries (vLLM's padded form)
    then computes the row before it, the last real request's last row, over its own zero keys, and
    writes zeros there.

    Origin: a kernel that launches ``max(1, q_len)`` query rows per request (an empty program is
    not launched, or a grid is sized by ceil-division) and indexes them from the request's end, as
    a decode step indexes its last token; it never meets a request of zero queries outside vLLM's
    graph padding.
    Caught by: PAD-SERVE-EMPTY.
    """

    name = "empty-request-borrows-a-row"
    clauses = {"PAD-SERVE-EMPTY"}
    empty_requests = ("paged_attention",)  # it is written for vLLM's padded steps

    def paged_attention(self, q, k_cache, v_cache, *, cu_seqlens_q, **kwargs):
        out = super().paged_attention(q, k_cache, v_cache, cu_seqlens_q=cu_seqlens_q, **kwargs)
        ends = cu_seqlens_q.tolist()
        for start, end in zip(ends[:-1], ends[1:], strict=True):
            if end == start:  # the borrowed row: attention over no key, written as zeros
                out[end - 1] = 0
        return out


BACKENDS = [
    NormBatchMaxPrescale(),
    FusedAddEmptyResidual(),
    SiluFloorDividedGrid(),
    MoeEmptyAccumulator(),
    RopeOffsetFromLastRow(),
    SharedSoftmaxShift(),
    SlotMappingZeroPadded(),
    EmptyRequestBorrowsARow(),
]

"""Serving-attention mutants of what the field hands a kernel (listed by ``mutants/serving.py``):
a scale other than 1/sqrt(Dqk) (ATTN-SCALE), thousands of keys (SERVE-LONG), strided views of q and
the caches (SERVE-LAYOUT). Each overrides one step of ``mutants._paged_base.PagedNative``, which is
correct as it stands; its docstring says what the bug is and where such bugs come from.
"""

from __future__ import annotations

import torch

from mutants._paged_base import PagedNative

PARTITION = 512  # vLLM's paged attention v2 partition (spec/serving.md, SERVE-LONG)


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t``'s memory from its data pointer read with the strides of a contiguous tensor of its shape:
    what a kernel that computes addresses as ((block * block_size + slot) * H + h) * D + d reads."""
    return t.as_strided(t.shape, _contiguous_strides(t.shape), t.storage_offset())


class ScaleRecomputedFromHeadDim(PagedNative):
    """The scale passed is ignored: the kernel uses 1/sqrt(Dqk) of the q it was given.

    Origin: a kernel (or adapter) that fills softmax_scale from the head dim "as everyone does";
    right for a plain model, wrong for MLA's absorbed decode (1/sqrt(192) at Dqk = 576) and for
    YaRN's mscale^2 (spec/attention.md, ATTN-SCALE).
    Caught by: ATTN-SCALE, SERVE.
    """

    clauses = {"ATTN-SCALE", "SERVE"}

    def scores(self, q, k, meta):
        return q.float() @ self.expand(k, q).transpose(-1, -2) * q.shape[-1] ** -0.5


class _FlashDecoding(PagedNative):
    """Decode rows (n_b = 1) over more than PARTITION keys: split-KV partials, then ``merge``."""

    def combine(self, scores, v, sinks):
        if scores.shape[1] != 1 or scores.shape[-1] <= PARTITION or sinks is not None:
            return super().combine(scores, v, sinks)
        partials = []
        for start in range(0, scores.shape[-1], PARTITION):
            part = scores[..., start : start + PARTITION]
            peak = part.amax(dim=-1, keepdim=True)
            if bool(torch.isinf(peak).all()):
                continue  # a partition no query sees (outside the window): skipped, as kernels do
            weights = torch.exp(part - peak).nan_to_num(0.0)
            total = weights.sum(dim=-1, keepdim=True)
            partials.append((peak, total, weights @ v[:, start : start + PARTITION] / total, part.shape[-1]))
        return self.merge(partials)

    def merge(self, partials):
        """The correct FlashDecoding merge: rescale every partial by exp(m_i - m)."""
        peak = torch.stack([m for m, _, _, _ in partials]).amax(dim=0)
        weights = [torch.exp(m - peak) * total for m, total, _, _ in partials]
        return sum(w * out for w, (_, _, out, _) in zip(weights, partials, strict=True)) / sum(weights)


class FlashDecodingMergeWithoutRescale(_FlashDecoding):
    """Split-KV decode whose partitions of 512 keys are merged by their exp sums alone, without
    rescaling each by exp(m_i - m): right when every partition has the same maximum score.

    Origin: flash-decoding reduce kernels (vLLM's paged attention v2, FlashAttention's num_splits)
    written from the plain weighted average; invisible below 513 keys, where one partition is all.
    Caught by: SERVE-LONG, SERVE, SERVE-DECODE.
    """

    clauses = {"SERVE-LONG", "SERVE", "SERVE-DECODE"}

    def merge(self, partials):
        totals = [total for _, total, _, _ in partials]
        return sum(t * out for t, (_, _, out, _) in zip(totals, partials, strict=True)) / sum(totals)


class FlashDecodingDropsPartialPartition(_FlashDecoding):
    """Split-KV decode over ceil(K / 512) - 1 partitions: the last, partial one (the newest keys,
    the query's own among them) is never computed when K is not a multiple of 512.

    Origin: the partition count computed as K // PARTITION instead of a ceiling division.
    Caught by: SERVE-LONG, SERVE, SERVE-DECODE.
    """

    clauses = {"SERVE-LONG", "SERVE", "SERVE-DECODE"}

    def merge(self, partials):
        if len(partials) > 1 and partials[-1][3] < PARTITION:
            partials = partials[:-1]
        return super().merge(partials)


class CacheReadAsContiguous(PagedNative):
    """The caches read from their data pointers as if contiguous [num_blocks, block_size, Hkv, D]:
    a slice of one [num_blocks, 2, ...] buffer is read half key, half value; an HND cache's
    transpose with heads and slots swapped.

    Origin: a custom kernel taking ``k_cache.data_ptr()`` with computed strides (and no
    ``.contiguous()`` in its adapter); right for every freshly allocated test cache.
    Caught by: SERVE-LAYOUT, SERVE.
    """

    clauses = {"SERVE-LAYOUT", "SERVE"}

    def read(self, cache, meta, b, start, stop):
        return super().read(_as_if_contiguous(cache), meta, b, start, stop)


class QueryRowsAsContiguous(PagedNative):
    """q read from its data pointer with row stride Hq * Dqk: a q sliced from a fused qkv projection
    is read with the k and v columns of the earlier tokens.

    Origin: a kernel that takes ``q.data_ptr()`` and ``num_heads * head_dim`` as its row stride
    (vLLM's q is ``qkv.split(...)[0].view(-1, Hq, D)``, rows strided by the whole projection).
    Caught by: SERVE-LAYOUT, SERVE.
    """

    clauses = {"SERVE-LAYOUT", "SERVE"}

    def paged_attention(self, q, k_cache, v_cache, **kwargs):
        return super().paged_attention(_as_if_contiguous(q), k_cache, v_cache, **kwargs)


MUTANTS = [
    (ScaleRecomputedFromHeadDim, "wrong-scale-recomputed-from-head-dim"),
    (FlashDecodingMergeWithoutRescale, "wrong-flash-decoding-merge-without-rescale"),
    (FlashDecodingDropsPartialPartition, "wrong-flash-decoding-drops-partial-partition"),
    (CacheReadAsContiguous, "wrong-cache-read-as-contiguous"),
    (QueryRowsAsContiguous, "wrong-query-rows-as-contiguous"),
]

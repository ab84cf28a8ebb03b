"""Invariance mutants: the field's batch-invariance and determinism bugs (spec/invariance.md, Sources).

Each class is the ``invariant`` reference backend (backends/invariant.py, which keeps every promise)
with one realistic bug; it still declares the promises, so the properties judge it. Its docstring
says what the bug is and where such bugs come from; ``clauses`` lists the clauses of which at least
one must fail.
"""

from __future__ import annotations

import itertools
import math

import torch

from backends.invariant import InvariantBackend, ordered_sum

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_invariance", "conformance.test_invariance_attention"]


def _reversed_sum(t: torch.Tensor) -> torch.Tensor:
    return ordered_sum(t.flip(-1))


def _even_splits(length: int, count: int) -> list[tuple[int, int]]:
    size = math.ceil(length / count)
    return [(lo, min(lo + size, length)) for lo in range(0, length, size)]


class SplitCountByBatch(InvariantBackend):
    """The number of KV splits chosen from the batch size (fewer sequences, more splits), the split
    size then ``ceil(L / splits)``.

    Origin: flash-decoding's occupancy heuristic (FlashAttention's ``num_splits``): "not batch
    invariant unless you fix the split-KV size" (Dao-AILab/flash-attention#1897).
    Caught by: INV-SPLIT.
    """

    name = "split-count-by-batch"
    clauses = {"INV-SPLIT"}

    def split_bounds(self, meta, b, length):
        return _even_splits(length, max(1, 8 // meta.batch))


class SlidingWindowDropsFixedSplit(InvariantBackend):
    """The fixed split size kept on the full-attention path but dropped on the sliding-window path,
    where the split count follows the batch size.

    Origin: sglang#26412 (the deterministic mode's fixed split missing on the SWA path while the
    Qwen3 CI, without windows, passed).
    Caught by: INV-SPLIT.
    """

    name = "sliding-window-drops-fixed-split"
    clauses = {"INV-SPLIT"}

    def split_bounds(self, meta, b, length):
        if meta.sliding_window is None:
            return super().split_bounds(meta, b, length)
        return _even_splits(length, max(1, 8 // meta.batch))


class TileByNeighbourQueryLength(InvariantBackend):
    """The KV split size doubled when any sequence of the batch has more than 8 new queries.

    Origin: flashinfer-ai/flashinfer#2424 (``cta_tile_q``, and with it the work partition, chosen from
    the query lengths of the whole batch).
    Caught by: INV-SEQ.
    """

    name = "tile-by-neighbour-query-length"
    clauses = {"INV-SEQ"}

    def split_bounds(self, meta, b, length):
        longest = max(meta.query_len(i) for i in range(meta.batch))
        n = self.kv_split_size * (2 if longest > 8 else 1)
        return [(lo, min(lo + n, length)) for lo in range(0, length, n)]


class DecodeSinglePass(InvariantBackend):
    """Decoding sequences (one new query) reduce over all their keys in one pass; prefill splits.

    Origin: separate decode and prefill kernels with their own reduction (the reason FlashAttention
    added ``split_size`` for a bitwise prefill == decode, Dao-AILab/flash-attention#2604).
    Caught by: INV-PREFILL-DECODE.
    """

    name = "decode-single-pass"
    clauses = {"INV-PREFILL-DECODE"}

    def split_bounds(self, meta, b, length):
        return [(0, length)] if meta.query_len(b) == 1 else super().split_bounds(meta, b, length)


class PrefixAndExtendInTwoPasses(InvariantBackend):
    """An extend reads the cached prefix in fixed splits, then its new tokens in one more pass merged
    by log-sum-exp: a split boundary at the chunk start, whatever the fixed size.

    Origin: cascade / two-stage extend attention (a prefix pass and an extend pass merged by their
    LSE), under chunked prefill and radix-cache hits (sglang#34683).
    Caught by: INV-CHUNK, INV-PREFIX.
    """

    name = "prefix-and-extend-in-two-passes"
    clauses = {"INV-CHUNK", "INV-PREFIX"}

    def split_bounds(self, meta, b, length):
        cached = length - meta.query_len(b)
        return super().split_bounds(meta, b, cached) + [(cached, length)] if cached else [(0, length)]


class RmsNormHalvesFromBatch256(InvariantBackend):
    """RMSNorm's mean of squares summed in two halves (two blocks) from 256 rows on.

    Origin: vLLM's RMSNorm launch picks a smaller block size at 256 tokens, which changes the
    reduction tree (vLLM's determinism tests compare rows 255 vs 300 for this).
    Caught by: INV-ROW.
    """

    name = "rms-norm-halves-from-batch-256"
    clauses = {"INV-ROW"}

    def _mean_square(self, h):
        if h.shape[0] < 256:
            return super()._mean_square(h)
        half = h.shape[-1] // 2
        return (ordered_sum(h[..., :half] ** 2) + ordered_sum(h[..., half:] ** 2)) / h.shape[-1]


class RmsNormOrderByRowParity(InvariantBackend):
    """RMSNorm's odd rows reduce right to left (two rows per warp, the second walking back).

    Origin: a kernel that packs two rows per thread block with mirrored lane orders: a row's
    reduction order then depends on its position in the batch.
    Caught by: INV-ROW.
    """

    name = "rms-norm-order-by-row-parity"
    clauses = {"INV-ROW"}

    def _mean_square(self, h):
        rows = h.reshape(-1, h.shape[-1])
        odd = torch.arange(rows.shape[0]) % 2 == 1
        out = torch.where(odd, _reversed_sum(rows * rows), ordered_sum(rows * rows)) / h.shape[-1]
        return out.reshape(h.shape[:-1])


class TopkTiesByBatchSize(InvariantBackend):
    """From 8 tokens on, routing takes another top-k path that breaks ties to the higher expert id.

    Origin: vllm#50979 (top-k ties kept by the PyTorch path, truncated by the Triton path used from
    batch 8).
    Caught by: INV-ROW.
    """

    name = "topk-ties-by-batch-size"
    clauses = {"INV-ROW"}

    def _top_ids(self, scores, top_k):
        if scores.shape[0] < 8:
            return super()._top_ids(scores, top_k)
        flipped = torch.sort(scores.flip(-1), dim=-1, descending=True, stable=True).indices
        return scores.shape[-1] - 1 - flipped[:, :top_k]


class ExpertSlotsInAtomicOrder(InvariantBackend):
    """A token's k expert outputs accumulated in an order that changes from call to call.

    Origin: MoE combine with ``atomicAdd`` into the output rows: the order in which the experts'
    blocks finish decides the float sum (vLLM's batch-invariant mode replaces it).
    Caught by: DET-RUN.
    """

    name = "expert-slots-in-atomic-order"
    clauses = {"DET-RUN"}
    _calls = itertools.count()

    def _combine(self, y):
        shift = next(self._calls) % y.shape[1]
        return ordered_sum(torch.roll(y, shift, dims=1).transpose(1, 2))


class ExpertRowOrderByPosition(InvariantBackend):
    """The down projection of a row at an odd position among its expert's rows reduces right to left.

    Origin: grouped GEMMs whose tile layout gives the rows of an expert's block different reduction
    orders; vLLM's batch-invariant MoE test permutes the rows within experts for this.
    Caught by: INV-PERM.
    """

    name = "expert-row-order-by-position"
    clauses = {"INV-PERM"}

    def _down(self, act, w2_rows, ids):
        products = act[:, :, None, :] * w2_rows  # [T, k, H, I]
        rank = torch.zeros_like(ids)
        for expert in ids.unique().tolist():
            token, slot = torch.nonzero(ids == expert, as_tuple=True)
            rank[token, slot] = torch.arange(token.numel())
        odd = (rank % 2 == 1)[:, :, None]
        return torch.where(odd, _reversed_sum(products), ordered_sum(products))


BACKENDS = [
    SplitCountByBatch(),
    SlidingWindowDropsFixedSplit(),
    TileByNeighbourQueryLength(),
    DecodeSinglePass(),
    PrefixAndExtendInTwoPasses(),
    RmsNormHalvesFromBatch256(),
    RmsNormOrderByRowParity(),
    TopkTiesByBatchSize(),
    ExpertSlotsInAtomicOrder(),
    ExpertRowOrderByPosition(),
]

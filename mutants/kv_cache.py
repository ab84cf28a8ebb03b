"""KV-cache write mutants: the slot, page-size, layout and fp8 bugs of spec/kv_cache.md.

Each class is one realistic bug in an otherwise correct write: ``_Write`` is native's write
(validate, keep the tokens with a slot >= 0, quantize, store at (s // bs, s % bs)) split into
steps, and each mutant overrides one step; ``ScaleIgnoredOnRead`` breaks the read side instead.
The docstring says what the bug is and where it comes from; ``clauses`` lists the clauses of which
at least one must fail.
"""

from __future__ import annotations

import torch

from backends import npu_kv_cache, paged
from backends.native import NativeBackend
from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from reference.kv_cache import FP8_MAX, validate_write_args

# The conformance module (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_kv_cache"]


class _Write(NativeBackend):
    """native's write_kv_cache in overridable steps (correct as it stands)."""

    def write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
        k_scale, v_scale = validate_write_args(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        keep, slots = self.kept(slot_mapping.to(k_cache.device))
        pairs = [(key, k_cache, k_scale)] + ([] if value is None else [(value, v_cache, v_scale)])
        for which, (source, cache, scale) in enumerate(self.route(pairs)):
            rows = self.rows(source, keep, which, value is None)
            self.store(cache, self.index(slots, cache), self.quantize(rows, cache, scale))

    # --- the steps ---------------------------------------------------------------------------

    def kept(self, slot_mapping):
        """(token ids with a slot >= 0, their slots as int64)."""
        keep = (slot_mapping >= 0).nonzero().squeeze(1)
        return keep, slot_mapping.to(torch.int64)[keep]

    def route(self, pairs):
        return pairs

    def rows(self, source, keep, which: int, key_only: bool):
        return source.index_select(0, keep.to(source.device))

    def index(self, slots, cache):
        return slots.div(cache.shape[1], rounding_mode="floor"), slots.remainder(cache.shape[1])

    def limit(self, dtype) -> float:
        return FP8_MAX[dtype]

    def quantize(self, rows, cache, scale):
        if scale is None:
            return rows
        quotient = rows.float() / self.per_head(scale).to(rows.device)[:, None]
        return quotient.clamp(-self.limit(cache.dtype), self.limit(cache.dtype)).to(cache.dtype)

    def per_head(self, scale):
        return scale

    def store(self, cache, index, rows):
        cache.index_put_(index, rows.to(cache.device))


class WriteSkipped(_Write):
    """The write never happens: the attention backend reads a cache nobody filled.

    Origin: sglang#17480 (Kimi-VL on NPU: `set_kv_buffer` was never called, accuracy 0.05 -> 0.67;
    spec/kv_cache.md, Sources).
    Caught by: KV-WRITE, KV-ROUND-TRIP.
    """

    clauses = {"KV-WRITE", "KV-ROUND-TRIP"}

    def store(self, cache, index, rows):
        return None


class NegativeSlotWritten(_Write):
    """Padded tokens are written too: slot -1 becomes block -1, offset bs - 1, the cache's last slot
    (Python's negative indexing).

    Origin: a port of `reshape_and_cache` without its `if (slot_idx < 0) return;`; vLLM's own test
    draws slots with `random.sample`, never -1.
    Caught by: KV-PAD, KV-WRITE.
    """

    clauses = {"KV-PAD", "KV-WRITE"}

    def kept(self, slot_mapping):
        return torch.arange(slot_mapping.shape[0], device=slot_mapping.device), slot_mapping.to(torch.int64)


class PaddingAssumedAtTheEnd(_Write):
    """The adapter filters the padded slots but keeps the FIRST n tokens' rows, as if padding were
    only at the end of the batch.

    Origin: an adapter for an op without skip semantics (Ascend `npu_scatter_nd_update_`) that
    compacts `slot_mapping[slot_mapping >= 0]` and slices `key[:n]`; right for CUDA-graph padding.
    Caught by: KV-PAD, KV-WRITE.
    """

    clauses = {"KV-PAD", "KV-WRITE"}

    def rows(self, source, keep, which, key_only):
        return source[: keep.numel()]


class PageSizeAssumed128(_Write):
    """Block and offset computed with a page size of 128 instead of k_cache.shape[1] (clamped into
    the buffer, as an out-of-bounds store lands somewhere in memory rather than raising).

    Origin: sglang#24582 (Step-3.5: `block_size = 128` hard-coded); sglang#38196 / #39905 (Ascend
    page sizes 16/32/64 corrupted, 128 fine).
    Caught by: KV-PAGE-SIZE, KV-WRITE.
    """

    clauses = {"KV-PAGE-SIZE", "KV-WRITE"}

    def index(self, slots, cache):
        blocks = slots.div(128, rounding_mode="floor").clamp(max=cache.shape[0] - 1)
        return blocks, slots.remainder(128).clamp(max=cache.shape[1] - 1)


class BlockAndOffsetSwapped(_Write):
    """cache[s % bs, s // bs] instead of cache[s // bs, s % bs] (clamped into the buffer).

    Origin: the index order of a [num_blocks, block_size] pool confused; op-plugin's
    `test_npu_scatter_pa_cache.py` golden even sets both to the slot (spec/kv_cache.md's evidence).
    Caught by: KV-WRITE, KV-PAGE-SIZE.
    """

    clauses = {"KV-WRITE", "KV-PAGE-SIZE"}

    def index(self, slots, cache):
        block, offset = super().index(slots, cache)
        return offset.clamp(max=cache.shape[0] - 1), block.clamp(max=cache.shape[1] - 1)


class HndWrittenAsNhd(_Write):
    """The cache's memory addressed with contiguous NHD strides: an HND cache (a transpose view) or
    half of a combined buffer is written at the wrong heads, offsets or into the other half.

    Origin: vllm#49012 / #53681 (the nvfp4 `reshape_and_cache_flash` took block_size from dim 1 and
    mis-swizzled HND caches); a kernel that computes addresses from `data_ptr()`.
    Caught by: KV-LAYOUT.
    """

    clauses = {"KV-LAYOUT"}

    def store(self, cache, index, rows):
        shape = cache.shape
        contiguous = (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1)
        cache.as_strided(shape, contiguous).index_put_(index, rows.to(cache.device))


class KeyAndValueCachesSwapped(_Write):
    """Keys stored into v_cache and values into k_cache (the two cache arguments swapped).

    Origin: a binding whose argument order (key_cache, value_cache) differs from the caller's;
    invisible while the test writes the same tensor as key and value.
    Caught by: KV-WRITE, KV-ROUND-TRIP.
    """

    clauses = {"KV-WRITE", "KV-ROUND-TRIP"}

    def route(self, pairs):
        if len(pairs) < 2 or pairs[0][1].shape != pairs[1][1].shape:
            return pairs
        (key, k_cache, k_scale), (value, v_cache, v_scale) = pairs
        return [(key, v_cache, v_scale), (value, k_cache, k_scale)]


class NeighbourSlotTouched(_Write):
    """Each token is also stored into the next slot (a vectorized store two slots wide), before
    the right store: a slot no token names changes.

    Origin: a store vectorized over the block dimension without a mask for its last lane.
    Caught by: KV-KEEP, KV-WRITE.
    """

    clauses = {"KV-KEEP", "KV-WRITE"}

    def store(self, cache, index, rows):
        block, offset = index
        slots = (block * cache.shape[1] + offset + 1).clamp(max=cache.shape[0] * cache.shape[1] - 1)
        spill = (slots.div(cache.shape[1], rounding_mode="floor"), slots.remainder(cache.shape[1]))
        super().store(cache, spill, rows)
        super().store(cache, index, rows)


class LatentWrittenWithValueDims(_Write):
    """The key-only (MLA latent) cache gets only the value's columns: the first 8/9 of them (512 of
    576 = kv_lora_rank + qk_rope_head_dim), so the rope part keeps stale data.

    Origin: an MLA port that sizes the latent copy with v_head_dim / kv_lora_rank (ik_llama.cpp#2031,
    Dk 576 / Dv 512).
    Caught by: KV-KEY-ONLY.
    """

    clauses = {"KV-KEY-ONLY"}

    def store(self, cache, index, rows):
        if getattr(self, "_key_only", False):
            width = cache.shape[3] * 8 // 9
            cache[..., :width].index_put_(index, rows[..., :width].to(cache.device))
            return
        super().store(cache, index, rows)

    def write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
        self._key_only = value is None
        super().write_kv_cache(key, value, k_cache, v_cache, slot_mapping, k_scale=k_scale, v_scale=v_scale)


class SlotsTruncatedToInt32(_Write):
    """int64 slots cast to int32 before the index arithmetic: slots past 2^31 wrap to negative
    numbers and are skipped as padding (or land elsewhere).

    Origin: int32 index arithmetic, the kernel default (and the Ascend ATB op's int32 slots).
    Caught by: KV-LARGE.
    """

    clauses = {"KV-LARGE"}

    def kept(self, slot_mapping):
        return super().kept(slot_mapping.to(torch.int32))


class ScaleMultipliedOnWrite(_Write):
    """The fp8 write multiplies by the scale instead of dividing (the read's convention reused).

    Origin: the two scale conventions (quantize x / s, dequantize q * s; some kernels take the
    inverse scale) confused; vllm#45562 (ROCm fp8 KV, GSM8K 0.967 -> 0.010).
    Caught by: KV-FP8, KV-FP8-SATURATE, KV-ROUND-TRIP.
    """

    clauses = {"KV-FP8", "KV-FP8-SATURATE", "KV-ROUND-TRIP"}

    def quantize(self, rows, cache, scale):
        if scale is None:
            return rows
        product = rows.float() * scale.to(rows.device)[:, None]
        return product.clamp(-self.limit(cache.dtype), self.limit(cache.dtype)).to(cache.dtype)


class FnuzSaturatedAt448(_Write):
    """float8_e4m3fnuz saturated at e4m3fn's 448 instead of 240: quotients from 248 on become NaN.

    Origin: ROCm/TransformerEngine#485 (448 used instead of 240); vllm#7210.
    Caught by: KV-FP8-SATURATE.
    """

    clauses = {"KV-FP8-SATURATE"}

    def limit(self, dtype):
        return 448.0


class FnuzNotSaturated(_Write):
    """The quotient clamped for float8_e4m3fn only: an e4m3fnuz cache gets NaN wherever |x / scale|
    passes 240 (fnuz has no infinity; the conversion of an out-of-range value is NaN).

    Origin: a write whose saturation comes from the e4m3fn conversion instruction (``satfinite``),
    ported to fnuz hardware without it; found in a field port's fp8 KV write (issue 36).
    Caught by: KV-FP8-SATURATE.
    """

    clauses = {"KV-FP8-SATURATE"}

    def limit(self, dtype):
        return FP8_MAX[dtype] if dtype == torch.float8_e4m3fn else float("inf")


class PerHeadScaleReadAsPerTensor(_Write):
    """A per-head scale [H] applied as its first entry to every head.

    Origin: a kernel that takes `*k_scale` (vLLM's per-tensor form) given a per-head tensor.
    Caught by: KV-FP8.
    """

    clauses = {"KV-FP8"}

    def per_head(self, scale):
        return scale[:1].expand(scale.shape[0])


class ScaleIgnoredOnRead(_Write):
    """paged_attention reads fp8 caches as their raw values: k_scale and v_scale are ignored.

    Origin: NVIDIA/TensorRT-LLM#16916 (MLA generation with the fp8 KV scales passed as None, 96 ->
    74 and decaying with length); a read path that upcasts the cache without its scale.
    Caught by: KV-FP8-READ, KV-ROUND-TRIP.
    """

    clauses = {"KV-FP8-READ", "KV-ROUND-TRIP"}

    @staticmethod
    def paged_attention(q, k_cache, v_cache, *, k_scale=None, v_scale=None, **kwargs):
        if k_scale is not None:
            k_scale, v_scale = torch.ones_like(k_scale), torch.ones_like(v_scale)
        return paged.paged_attention(q, k_cache, v_cache, k_scale=k_scale, v_scale=v_scale, **kwargs)


class _Ascend(AscendBackend):
    """The emulated Ascend adapter (its write through npu_scatter_pa_kv_cache, spec/ascend.md)."""

    def __init__(self, name: str):
        super().__init__(name, load_emulator, emulator_unavailable)


class AscendPaddingPassedToTheOp(_Ascend):
    """The Ascend adapter passes slot_mapping as it is, padded tokens included, to an op whose slots
    must lie in [0, N - 1] (no skip semantics): the emulated op rejects -1.

    Origin: an adapter ported from vLLM's `reshape_and_cache_flash`, which skips slot -1 itself
    (spec/ascend.md, CANN-KV-WRITE; the op-plugin test's golden skipping -1 hides it).
    Caught by: KV-PAD, KV-WRITE.
    """

    clauses = {"KV-PAD", "KV-WRITE"}

    def write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
        validate_write_args(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        if value is None or k_scale is not None or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            scales = {"k_scale": k_scale, "v_scale": v_scale}
            return npu_kv_cache.write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, **scales)
        self.ops.npu_scatter_pa_kv_cache(key.contiguous(), value.contiguous(), k_cache, v_cache,
                                         slot_mapping.contiguous(), cache_mode="Norm")  # fmt: skip


class AscendDefaultCacheMode(_Ascend):
    """The Ascend adapter calls npu_scatter_pa_kv_cache without cache_mode: its default 'PA_NZ'
    expects NZ caches [num_blocks, N * D // 16, block_size, 16], not the contract's ND ones.

    Origin: the op's documented default (`cache_mode='PA_NZ'`, spec/ascend.md CANN-KV-WRITE);
    vllm-ascend#2988 (the NZ cache path produced garbage in decode).
    Caught by: KV-WRITE, KV-PAGE-SIZE.
    """

    clauses = {"KV-WRITE", "KV-PAGE-SIZE"}

    @property
    def ops(self):
        ops = super().ops

        class DefaultMode:
            def __getattr__(self, name):
                return getattr(ops, name)

            @staticmethod
            def npu_scatter_pa_kv_cache(*args, cache_mode=None, **kwargs):
                return ops.npu_scatter_pa_kv_cache(*args, **kwargs)  # cache_mode dropped: 'PA_NZ'

        return DefaultMode()


def _named(cls, name: str):
    backend = cls(name) if issubclass(cls, AscendBackend) else cls()
    backend.name = name
    return backend


BACKENDS = [
    _named(WriteSkipped, "wrong-kv-write-skipped"),
    _named(NegativeSlotWritten, "wrong-kv-negative-slot-written"),
    _named(PaddingAssumedAtTheEnd, "wrong-kv-padding-assumed-at-the-end"),
    _named(PageSizeAssumed128, "wrong-kv-page-size-assumed-128"),
    _named(BlockAndOffsetSwapped, "wrong-kv-block-and-offset-swapped"),
    _named(HndWrittenAsNhd, "wrong-kv-hnd-written-as-nhd"),
    _named(KeyAndValueCachesSwapped, "wrong-kv-caches-swapped"),
    _named(NeighbourSlotTouched, "wrong-kv-neighbour-slot-touched"),
    _named(LatentWrittenWithValueDims, "wrong-kv-latent-written-with-value-dims"),
    _named(SlotsTruncatedToInt32, "wrong-kv-slots-truncated-to-int32"),
    _named(ScaleMultipliedOnWrite, "wrong-kv-fp8-scale-multiplied-on-write"),
    _named(FnuzSaturatedAt448, "wrong-kv-fnuz-saturated-at-448"),
    _named(FnuzNotSaturated, "wrong-kv-fnuz-not-saturated"),
    _named(PerHeadScaleReadAsPerTensor, "wrong-kv-per-head-scale-read-as-per-tensor"),
    _named(ScaleIgnoredOnRead, "wrong-kv-fp8-scale-ignored-on-read"),
    _named(AscendPaddingPassedToTheOp, "wrong-kv-ascend-padding-passed-to-the-op"),
    _named(AscendDefaultCacheMode, "wrong-kv-ascend-default-cache-mode-pa-nz"),
]

"""The Ascend adapter's KV-cache write (spec/kv_cache.md through spec/ascend.md, CANN-KV-WRITE).

``_npu_reshape_and_cache`` (ATB ReshapeAndCache) writes key and value when the slots are int32 and
the rows float16, bfloat16 or fp8 bytes (as int8); otherwise ``npu_scatter_pa_kv_cache`` in 'Norm'
mode does (never its default 'PA_NZ', which wants NZ-shaped caches); a key-only cache
(KV-KEY-ONLY) goes through ``npu_scatter_nd_update_`` on the cache's [slots, H, D] view, as that op
needs no value. No op skips padded tokens (their slots must lie in [0, N - 1]), so the adapter
drops the tokens with a negative slot first, keeping each token's own rows. All want contiguous
tensors: a strided cache (HND, half of a combined buffer) is written into a contiguous copy that is
copied back. fp8 caches are quantized here with torch ops (KV-FP8: the ops take values already in
the cache's dtype, no scale) and scattered as their bytes, which also covers e4m3fnuz, a dtype the
ops do not list.
"""

from __future__ import annotations

import torch

from reference.kv_cache import FP8_MAX, is_fp8, validate_write_args

__all__ = ["write_kv_cache"]


def _stored(rows: torch.Tensor, cache: torch.Tensor, scale) -> torch.Tensor:
    """The rows in the cache's representation: the key's own values, or fp8 bytes (KV-FP8)."""
    if scale is None:
        return rows.contiguous()
    limit = FP8_MAX[cache.dtype]
    quantized = (rows.float() / scale.to(rows.device)[:, None]).clamp(-limit, limit).to(cache.dtype)
    return quantized.contiguous().view(torch.uint8)


def _work(cache: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor the op may write: the cache itself, or a copy (then copied back)."""
    work = cache if cache.is_contiguous() else cache.contiguous()
    return work.view(torch.uint8) if is_fp8(cache.dtype) else work


def _atb_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """The dtype ATB ReshapeAndCache takes the rows as: their own, int8 for fp8 bytes, None if neither."""
    if dtype in (torch.float16, torch.bfloat16):
        return dtype
    return torch.int8 if dtype == torch.uint8 else None


def write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
    """KV-WRITE on the NPU ops (the AscendBackend method; ``self.ops`` is torch_npu or the emulator)."""
    k_scale, v_scale = validate_write_args(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale)
    keep = (slot_mapping >= 0).nonzero().squeeze(1)  # the ops have no skip semantics: filter padding
    slots = slot_mapping.index_select(0, keep).contiguous()
    if slots.numel() == 0:
        return None
    caches = [k_cache] if value is None else [k_cache, v_cache]
    rows = [_stored(key.index_select(0, keep.to(key.device)), k_cache, k_scale)]
    if value is not None:
        rows.append(_stored(value.index_select(0, keep.to(value.device)), v_cache, v_scale))
    work = [_work(c) for c in caches]
    if value is None:
        flat = work[0].view(-1, *work[0].shape[2:])  # [slots, H, D]
        self.ops.npu_scatter_nd_update_(flat, slots.to(torch.int64)[:, None], rows[0])
    elif slots.dtype == torch.int32 and _atb_dtype(rows[0].dtype) is not None:
        # vllm-ascend's usual path: ATB ReshapeAndCache (int32 slots; float16/bfloat16, fp8 bytes as int8)
        as_atb = [t.view(_atb_dtype(t.dtype)) for t in (*rows, *work)]
        self.ops._npu_reshape_and_cache(*as_atb, slots)
    else:
        self.ops.npu_scatter_pa_kv_cache(rows[0], rows[1], work[0], work[1], slots, cache_mode="Norm")
    for cache, written in zip(caches, work, strict=True):
        if written.data_ptr() != cache.data_ptr() or not cache.is_contiguous():
            cache.copy_(written.view(cache.dtype) if is_fp8(cache.dtype) else written)
    return None

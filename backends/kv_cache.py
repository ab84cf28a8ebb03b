"""The ``native`` backend's KV-cache write (spec/kv_cache.md): one indexed store per cache.

Validation is the oracle's (``reference.kv_cache.validate_write_args``), so the errors are the same.
The store goes through the cache's own strides (``index_put_`` on the 4-D view: an HND cache or
half of a combined buffer is written where it lives, KV-LAYOUT), with int64 block and offset
indices (KV-LARGE); an fp8 cache gets the float32 quotient saturated to the format's maximum,
then PyTorch's round-to-nearest-even conversion (KV-FP8, KV-FP8-SATURATE).
"""

from __future__ import annotations

import torch

from reference.kv_cache import FP8_MAX, validate_write_args

__all__ = ["write_kv_cache"]


def _rows(source: torch.Tensor, cache: torch.Tensor, scale) -> torch.Tensor:
    """The values a slot stores: the source's own (a cache of its dtype) or their fp8 quantization."""
    if scale is None:
        return source
    limit = FP8_MAX[cache.dtype]
    return (source.float() / scale.to(source.device)[:, None]).clamp_(-limit, limit).to(cache.dtype)


def write_kv_cache(key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None) -> None:
    """KV-WRITE: tokens with slot s >= 0 stored at (s // bs, s % bs) of each cache, in place."""
    k_scale, v_scale = validate_write_args(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale)
    slots = slot_mapping.to(device=k_cache.device, dtype=torch.int64)
    keep = (slots >= 0).nonzero().squeeze(1)
    slots = slots[keep]
    index = (slots.div(k_cache.shape[1], rounding_mode="floor"), slots.remainder(k_cache.shape[1]))
    pairs = [(key, k_cache, k_scale)] + ([] if value is None else [(value, v_cache, v_scale)])
    for source, cache, scale in pairs:
        rows = _rows(source.index_select(0, keep.to(source.device)), cache, scale)
        cache.index_put_(index, rows.to(cache.device))

"""Oracle for the KV-cache write (KV-WRITE and the clauses after it): a bit-exact
scatter, and the fp8 quantize / dequantize rules (KV-FP8, KV-FP8-SATURATE, KV-FP8-READ).

No float64 here: the write stores the key's own bits (a cache of key's dtype) or the fp8 value of
a float32 quotient (KV-FP8), so the oracle computes exactly what the contract says and the
comparison is bit for bit. Only the read's dequantization (``dequantize``) returns float64, where
fp8 times a float32 scale is exact. tests/test_reference_kv_cache.py proves the oracle equal to a
per-token write written from the spec text, with fp8 rounding by enumeration of every fp8 value.
"""

from __future__ import annotations

import torch

from reference.validation import require_with_data

__all__ = [
    "FP8_DTYPES",
    "FP8_MAX",
    "dequantize",
    "dequantized_caches",
    "is_fp8",
    "quantize",
    "read_scales",
    "validate_scale",
    "validate_slots",
    "validate_write_args",
    "write_kv_cache",
]

# KV-FP8: the largest finite value of each fp8 cache format.
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0}
FP8_DTYPES = tuple(FP8_MAX)
SLOT_DTYPES = (torch.int32, torch.int64)


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_MAX


def _require_cache_tensor(value, name: str, rank: int) -> torch.Tensor:
    """KV-ERRORS: a floating tensor (TypeError otherwise) of ``rank`` dims with data (ValueError)."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        got = getattr(value, "dtype", type(value).__name__)
        raise TypeError(f"{name} must be a floating tensor, got {got}")
    if value.dim() != rank:
        raise ValueError(f"{name} must be a {rank}-D tensor, got shape {tuple(value.shape)}")
    return require_with_data(value, name)


def validate_scale(scale, name: str, cache_dtype: torch.dtype, heads: int, cache_name: str):
    """KV-FP8 / KV-ERRORS: None for a cache of the key's dtype; for an fp8 cache a finite, positive
    float32 tensor of shape [], [1] or [heads], returned as float32 [heads] on its own device."""
    if not is_fp8(cache_dtype):
        if scale is not None:
            raise ValueError(f"{name} must be None for a {cache_dtype} {cache_name} (only fp8 caches scale)")
        return None
    if scale is None:
        raise ValueError(f"{name} is required for the {cache_dtype} {cache_name} (fp8 needs its scale)")
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        got = getattr(scale, "dtype", type(scale).__name__)
        raise ValueError(f"{name} must be a float32 tensor, got {got}")
    require_with_data(scale, name)
    if tuple(scale.shape) not in ((), (1,), (heads,)):
        raise ValueError(f"{name} must have shape [], [1] or [H] = [{heads}], got {tuple(scale.shape)}")
    if not bool(torch.isfinite(scale).all()) or not bool((scale > 0).all()):
        raise ValueError(f"{name} must be finite and > 0, got {scale.tolist()}")
    return scale.reshape(-1).expand(heads)


def validate_slots(slot_mapping, tokens: int, slots: int) -> torch.Tensor:
    """KV-ERRORS: a 1-D int32/int64 tensor of ``tokens`` entries, each < ``slots``, no non-negative
    entry twice; returned as given."""
    if not isinstance(slot_mapping, torch.Tensor) or slot_mapping.dtype not in SLOT_DTYPES:
        got = getattr(slot_mapping, "dtype", type(slot_mapping).__name__)
        raise ValueError(f"slot_mapping must be an int32 or int64 tensor, got {got}")
    require_with_data(slot_mapping, "slot_mapping")
    if slot_mapping.dim() != 1 or slot_mapping.shape[0] > tokens:
        raise ValueError(
            f"slot_mapping must have shape [T'] with T' <= T = {tokens}, got {tuple(slot_mapping.shape)}"
        )
    used = slot_mapping[slot_mapping >= 0]
    if used.numel():
        top = int(used.max())
        if top >= slots:
            raise ValueError(f"slot_mapping holds slot {top}, outside the cache's {slots} slots")
        if torch.unique(used).numel() != used.numel():
            raise ValueError("slot_mapping names a slot twice (KV-WRITE: duplicate slots are bad input)")
    return slot_mapping


def validate_write_args(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale):
    """KV-ERRORS for every argument of write_kv_cache; returns (k_scale, v_scale) as float32 [H] or None.

    Shared by the oracle and the backends, so all raise the same errors."""
    _require_cache_tensor(key, "key", 3)
    _require_cache_tensor(k_cache, "k_cache", 4)
    if (value is None) != (v_cache is None):
        missing = "v_cache" if v_cache is None else "value"
        raise ValueError(
            f"value and v_cache go together (KV-KEY-ONLY: both None for a key-only cache); {missing} is None"
        )
    tokens, heads, key_dim = key.shape
    num_blocks, block_size, cache_heads, cache_dim = k_cache.shape
    if (cache_heads, cache_dim) != (heads, key_dim):
        raise ValueError(f"k_cache must be [num_blocks, block_size, H, Dk] with H, Dk = {heads}, {key_dim} "
                         f"(key's), got {tuple(k_cache.shape)}")  # fmt: skip
    _require_cache_dtype(k_cache, "k_cache", key.dtype)
    if value is not None:
        _require_cache_tensor(value, "value", 3)
        _require_cache_tensor(v_cache, "v_cache", 4)
        if value.dtype != key.dtype:
            raise ValueError(f"value must have key's dtype {key.dtype}, got {value.dtype}")
        if tuple(value.shape[:2]) != (tokens, heads):
            raise ValueError(f"value must be [T, H, Dv] = [{tokens}, {heads}, Dv], got {tuple(value.shape)}")
        if tuple(v_cache.shape) != (num_blocks, block_size, heads, value.shape[2]):
            want = [num_blocks, block_size, heads, value.shape[2]]
            raise ValueError(f"v_cache must be [num_blocks, bs, H, Dv] = {want}, got {tuple(v_cache.shape)}")
        _require_cache_dtype(v_cache, "v_cache", key.dtype)
        if v_cache.dtype != k_cache.dtype:
            raise ValueError(f"v_cache must have k_cache's dtype {k_cache.dtype}, got {v_cache.dtype}")
    elif v_scale is not None:
        raise ValueError("v_scale must be None for a key-only cache (v_cache is None)")
    validate_slots(slot_mapping, tokens, num_blocks * block_size)
    k_scale = validate_scale(k_scale, "k_scale", k_cache.dtype, heads, "k_cache")
    if value is not None:
        v_scale = validate_scale(v_scale, "v_scale", v_cache.dtype, heads, "v_cache")
    return k_scale, v_scale


def _require_cache_dtype(cache: torch.Tensor, name: str, key_dtype: torch.dtype) -> None:
    if cache.dtype != key_dtype and not is_fp8(cache.dtype):
        raise ValueError(f"{name} must have key's dtype {key_dtype} or an fp8 dtype "
                         f"{[str(d) for d in FP8_DTYPES]}, got {cache.dtype}")  # fmt: skip


def quantize(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """KV-FP8: fp8(clamp(fl32(x / scale_h), -M, M)) for x [..., H, D] and scale float32 [H]: the
    float32 quotient (IEEE division), saturated to the format's largest finite M (KV-FP8-SATURATE),
    then PyTorch's float32 -> fp8 conversion (round to nearest even; the self-test proves it)."""
    limit = FP8_MAX[dtype]
    quotient = x.to(torch.float32) / scale.to(x.device)[:, None]
    return quotient.clamp(-limit, limit).to(dtype)


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """KV-FP8-READ: value(q) * scale_h in float64 (exact) for q [..., H, D], scale [H]."""
    return q.to(torch.float64) * scale.to(q.device, torch.float64)[:, None]


def read_scales(k_cache, v_cache, k_scale, v_scale):
    """KV-FP8-READ's checks for paged_attention, without reading the caches: None when neither cache
    is fp8 (then both scales must be None), else (k_scale, v_scale) as float32 [Hkv] after checking
    that both caches are 4-D fp8 tensors of one dtype. The caches' shapes are SERVE's, validated by
    the caller."""
    fp8 = [isinstance(t, torch.Tensor) and is_fp8(t.dtype) for t in (k_cache, v_cache)]
    if not any(fp8):
        validate_scale(k_scale, "k_scale", getattr(k_cache, "dtype", None), 0, "k_cache")
        validate_scale(v_scale, "v_scale", getattr(v_cache, "dtype", None), 0, "v_cache")
        return None
    if not all(fp8) or k_cache.dtype != v_cache.dtype:
        dtypes = [getattr(t, "dtype", type(t).__name__) for t in (k_cache, v_cache)]
        raise ValueError(f"v_cache must have k_cache's dtype {dtypes[0]}, got {dtypes[1]}")
    if k_cache.dim() != 4 or v_cache.dim() != 4:
        shapes = f"{tuple(k_cache.shape)}, {tuple(v_cache.shape)}"
        raise ValueError(f"k_cache and v_cache must be 4-D, got {shapes}")
    k_scale = validate_scale(k_scale, "k_scale", k_cache.dtype, k_cache.shape[2], "k_cache")
    v_scale = validate_scale(v_scale, "v_scale", v_cache.dtype, v_cache.shape[2], "v_cache")
    return k_scale, v_scale


def dequantized_caches(k_cache, v_cache, k_scale, v_scale, dtype: torch.dtype):
    """KV-FP8-READ for a backend's paged_attention: (k_cache, v_cache) unchanged when neither is fp8
    (then both scales must be None), else both whole caches dequantized into ``dtype`` (a backend's
    compute dtype; the oracle dequantizes only the blocks it reads, reference.serving)."""
    scales = read_scales(k_cache, v_cache, k_scale, v_scale)
    if scales is None:
        return k_cache, v_cache
    return tuple(dequantize(c, s).to(dtype) for c, s in zip((k_cache, v_cache), scales, strict=True))


def _store(cache: torch.Tensor, tokens: torch.Tensor, slots: torch.Tensor, scale) -> None:
    """KV-WRITE into one cache: slot s of each token at (s // bs, s % bs), through the cache's strides."""
    block_size = cache.shape[1]
    rows = tokens if scale is None else quantize(tokens, scale, cache.dtype)
    cache[slots // block_size, slots % block_size] = rows.to(cache.device)


def write_kv_cache(key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None) -> None:
    """KV-WRITE: in place; tokens with a negative slot are skipped (KV-PAD), nothing else is touched
    (KV-KEEP). key [T, H, Dk], value [T, H, Dv] or None (KV-KEY-ONLY), caches [num_blocks, bs, H, D*]
    (any strides, KV-LAYOUT), slot_mapping [T'] int32/int64 with T' <= T (rows T' .. T - 1 of key and
    value are padding: KV-PAD); fp8 caches quantize with their scales."""
    k_scale, v_scale = validate_write_args(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale)
    written = slot_mapping.shape[0]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].to(torch.int64).to(k_cache.device)
    keep = keep.to(key.device)
    _store(k_cache, key[:written][keep], slots, k_scale)
    if value is not None:
        _store(v_cache, value[:written][keep.to(value.device)], slots.to(v_cache.device), v_scale)

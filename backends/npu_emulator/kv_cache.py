"""Emulated KV-cache write ops of torch_npu (spec/ascend.md, CANN-KV-WRITE): ``npu_scatter_pa_kv_cache``
(Norm and PA_NZ caches), ``_npu_reshape_and_cache`` (ATB ReshapeAndCache, ND) and ``npu_scatter_nd_update_``.

Each follows its documented restrictions, which the adapter has to meet: contiguous inputs, one
dtype for key, value and both caches, slots in ``[0, num_blocks * block_size - 1]`` and unique (no
padding: negative slots are out of range), ``cache_mode`` defaulting to ``'PA_NZ'``. Where the
documentation is silent the emulator raises rather than guess (marked in spec/ascend.md).
"""

from __future__ import annotations

import torch

__all__ = ["_npu_reshape_and_cache", "npu_scatter_nd_update_", "npu_scatter_pa_kv_cache"]

# The documented key dtypes of npu_scatter_pa_kv_cache (torch's names; hifloat8 has none).
SCATTER_DTYPES = (
    torch.float16, torch.float32, torch.bfloat16, torch.int8, torch.uint8, torch.int16, torch.uint16,
    torch.int32, torch.uint32, torch.float8_e5m2, torch.float8_e4m3fn,
)  # fmt: skip


def _require_slots(slots: torch.Tensor, total: int, name: str) -> torch.Tensor:
    if not isinstance(slots, torch.Tensor) or slots.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be an int32 or int64 tensor, got {getattr(slots, 'dtype', slots)!r}")
    flat = slots.reshape(-1).to(torch.int64)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= total):
        raise ValueError(
            f"{name} values must lie in [0, {total - 1}], got {flat.min().item()}..{flat.max().item()}"
        )
    if torch.unique(flat).numel() != flat.numel():
        raise ValueError(f"{name} values must be unique (accuracy is not guaranteed otherwise)")
    return flat


def _nz_last(dtype: torch.dtype) -> int:
    return 32 // torch.empty((), dtype=dtype).element_size()


def npu_scatter_pa_kv_cache(
    key, value, key_cache, value_cache, slot_mapping, *, compress_lens=None, compress_seq_offsets=None,
    seq_lens=None, cache_mode="PA_NZ",
):  # fmt: skip
    """In place: token t's key and value into slot ``slot_mapping[t]`` of the caches; returns None.

    'Norm' (or None): caches [num_blocks, block_size, N, D] (ND). 'PA_NZ': caches [num_blocks,
    N * D // last, block_size, last] with last = 32 // itemsize, token t's N * D values split into
    ``last``-wide chunks along dim 1 (the chunk order is inferred, spec/ascend.md CANN-KV-WRITE).
    Only the 3-D key/value scenario is emulated."""
    if compress_lens is not None or compress_seq_offsets is not None or seq_lens is not None:
        raise NotImplementedError(
            "the compressed (4-D key) scenario of npu_scatter_pa_kv_cache is not emulated"
        )
    tensors = {"key": key, "value": value, "key_cache": key_cache, "value_cache": value_cache}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if not t.is_contiguous():
            raise ValueError(f"{name}: non-contiguous input parameters are not supported")
        if t.dtype != key.dtype:
            raise TypeError(f"{name} must have key's dtype {key.dtype}, got {t.dtype}")
    if key.dtype not in SCATTER_DTYPES:
        raise TypeError(f"key's dtype {key.dtype} is not supported by npu_scatter_pa_kv_cache")
    if key.dim() != 3 or value.dim() != 3 or key.shape[:2] != value.shape[:2]:
        raise ValueError(
            f"key and value must be 3-D with the same first two dims, got {key.shape}, {value.shape}"
        )
    if not slot_mapping.is_contiguous():
        raise ValueError("slot_mapping: non-contiguous input parameters are not supported")
    if cache_mode in (None, "Norm"):
        block_size = key_cache.shape[1]
        for source, cache, name in ((key, key_cache, "key_cache"), (value, value_cache, "value_cache")):
            if (
                cache.dim() != 4
                or cache.shape[1] != block_size
                or tuple(cache.shape[2:]) != tuple(source.shape[1:])
            ):
                raise ValueError(
                    f"{name} must be [num_blocks, block_size, N, D] for 'Norm', got {tuple(cache.shape)}"
                )
        slots = _require_slots(slot_mapping, key_cache.shape[0] * block_size, "slot_mapping")
        for source, cache in ((key, key_cache), (value, value_cache)):
            cache.view(-1, *cache.shape[2:])[slots] = source
        return None
    if cache_mode != "PA_NZ":
        raise ValueError(f"cache_mode must be 'PA_NZ', 'Norm' or None, got {cache_mode!r}")
    last = _nz_last(key.dtype)
    block_size = key_cache.shape[2] if key_cache.dim() == 4 else -1
    for source, cache, name in ((key, key_cache, "key_cache"), (value, value_cache, "value_cache")):
        width = source.shape[1] * source.shape[2]
        want = (cache.shape[0], width // last, block_size, last) if cache.dim() == 4 else None
        if width % last or cache.dim() != 4 or tuple(cache.shape) != want:
            raise ValueError(f"{name} must be [num_blocks, N * D // {last}, block_size, {last}] for 'PA_NZ' "
                             f"(N * D = {width}), got {tuple(cache.shape)}")  # fmt: skip
    slots = _require_slots(slot_mapping, key_cache.shape[0] * block_size, "slot_mapping")
    blocks, offsets = slots // block_size, slots % block_size
    for source, cache in ((key, key_cache), (value, value_cache)):
        chunks = source.reshape(source.shape[0], -1, last)  # [T, N * D // last, last]
        cache.permute(0, 2, 1, 3)[blocks, offsets] = chunks
    return None


def npu_scatter_nd_update_(input, indices, updates):
    """In place: ``input[indices[i]] = updates[i]`` over the leading ``indices.shape[-1]`` dims;
    indices (int32/int64) must be in range: a negative index is not Python's last element (the
    emulator raises, spec/ascend.md CANN-KV-WRITE). Returns ``input``."""
    if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            f"indices must be an int32 or int64 tensor, got {getattr(indices, 'dtype', indices)!r}"
        )
    depth = indices.shape[-1]
    index = indices.reshape(-1, depth).to(torch.int64)
    for d in range(depth):
        if index.numel() and (int(index[:, d].min()) < 0 or int(index[:, d].max()) >= input.shape[d]):
            raise ValueError(f"indices[..., {d}] must lie in [0, {input.shape[d] - 1}]")
    if tuple(updates.shape) != (*indices.shape[:-1], *input.shape[depth:]):
        raise ValueError(
            f"updates must be {(*indices.shape[:-1], *input.shape[depth:])}, got {tuple(updates.shape)}"
        )
    input[tuple(index.T)] = updates.reshape(index.shape[0], *input.shape[depth:]).to(input.dtype)
    return input


# ATB ReshapeAndCache's dtypes: one for key, value and both caches (spec/ascend.md, CANN-KV-WRITE).
RESHAPE_AND_CACHE_DTYPES = (torch.float16, torch.bfloat16, torch.int8)


def _npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices):
    """In place (ATB ReshapeAndCache, ND): token t into slot ``slot_indices[t]`` of both caches
    [num_blocks, block_size, N, D]; int32 slots, one dtype of float16 / bfloat16 / int8 for all four
    tensors. Negative slots are rejected (their handling is not documented: emulator choice)."""
    for name, t in {"key": key, "value": value, "key_cache": key_cache, "value_cache": value_cache}.items():
        if not isinstance(t, torch.Tensor) or t.dtype not in RESHAPE_AND_CACHE_DTYPES or t.dtype != key.dtype:
            raise TypeError(f"{name} must share key's dtype, one of {RESHAPE_AND_CACHE_DTYPES}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (ND format)")
    if not isinstance(slot_indices, torch.Tensor) or slot_indices.dtype != torch.int32:
        raise TypeError(
            f"slot_indices must be an int32 tensor, got {getattr(slot_indices, 'dtype', slot_indices)!r}"
        )
    npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_indices.contiguous(), cache_mode="Norm")

"""Emulated ``torch_npu._npu_paged_attention``, ATB's PagedAttentionOperation (spec/ascend.md,
CANN-PAGED-ATTENTION): decode attention, one query token per sequence, over a paged cache.

    _npu_paged_attention(query, key_cache, value_cache, num_kv_heads, num_heads, scale_value,
                         block_table, context_lens, out) -> None

- ``query [num_tokens, num_heads, head_size]``: token b is sequence b's one query row.
- ``key_cache`` / ``value_cache [num_blocks, block_size, kv_heads, head_size]`` (one head size).
- ``num_kv_heads`` 0 means ``num_heads``; otherwise ``num_heads`` is a multiple of it.
- ``scale_value`` multiplies Q K^T (ATB's qkScale, default 1.0 there; required here).
- ``block_table`` int32 ``[num_tokens, >= max blocks]``; ``context_lens`` int32 ``[num_tokens]``, each
  sequence's OWN kv length, on the host (**inferred** from the call sites).
- ``out [num_tokens, num_heads, head_size]`` in q's dtype, written in place; nothing is returned.

The computation is FIA's paged TND path without a mask, one query row per sequence
(``paged_attention.fia_tnd_paged``): only the blocks and positions below ``context_lens[b]`` are
read. Violations raise RuntimeError.
"""

from __future__ import annotations

import torch

from backends.npu_emulator.attention import SUPPORTED_DTYPES
from backends.npu_emulator.paged_attention import fia_tnd_paged


def _fail(message: str):
    raise RuntimeError(f"_npu_paged_attention: {message}")


def _check(query, key_cache, value_cache, num_kv_heads, num_heads, block_table, context_lens, out) -> int:
    """The documented shapes and dtypes; returns the kv head count."""
    for name, tensor in (("query", query), ("key_cache", key_cache), ("value_cache", value_cache)):
        if not isinstance(tensor, torch.Tensor) or tensor.dtype not in SUPPORTED_DTYPES:
            _fail(f"{name} must be a float16/bfloat16 tensor, got {getattr(tensor, 'dtype', tensor)}")
    if query.dim() != 3 or query.shape[1] != num_heads:
        _fail(f"query must be [num_tokens, num_heads={num_heads}, head_size], got {tuple(query.shape)}")
    kv_heads = num_heads if num_kv_heads == 0 else num_kv_heads
    if kv_heads <= 0 or num_heads % kv_heads:
        _fail(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    want = (kv_heads, query.shape[2])
    if key_cache.dim() != 4 or tuple(key_cache.shape[2:]) != want or value_cache.shape != key_cache.shape:
        _fail(f"key_cache/value_cache must be equal [num_blocks, block_size, {want[0]}, {want[1]}]: "
              f"{tuple(key_cache.shape)}, {tuple(value_cache.shape)}")  # fmt: skip
    if key_cache.dtype != query.dtype or value_cache.dtype != query.dtype:
        _fail("key_cache and value_cache must have the query's dtype")
    tokens = query.shape[0]
    if not isinstance(block_table, torch.Tensor) or (block_table.dtype, block_table.dim()) != (
        torch.int32,
        2,
    ):
        _fail(f"block_table must be a 2-D int32 tensor, got {getattr(block_table, 'dtype', block_table)}")
    if block_table.shape[0] != tokens:
        _fail(f"block_table must have num_tokens={tokens} rows, got {tuple(block_table.shape)}")
    if not isinstance(context_lens, torch.Tensor) or context_lens.dtype != torch.int32:
        _fail(f"context_lens must be an int32 tensor, got {getattr(context_lens, 'dtype', context_lens)}")
    if tuple(context_lens.shape) != (tokens,) or context_lens.device.type != "cpu":
        _fail(f"context_lens must be a [num_tokens={tokens}] host tensor, got {tuple(context_lens.shape)} "
              f"on {context_lens.device}")  # fmt: skip
    lengths, block_size = context_lens.tolist(), key_cache.shape[1]
    needed = max((-(-n // block_size) for n in lengths), default=0)
    if any(n < 0 for n in lengths) or needed > block_table.shape[1]:
        _fail(
            f"context_lens {lengths} need {needed} block_table columns, the table has {block_table.shape[1]}"
        )
    if not isinstance(out, torch.Tensor) or (out.shape, out.dtype) != (query.shape, query.dtype):
        _fail(f"out must be a {query.dtype} tensor of the query's shape {tuple(query.shape)}")
    return kv_heads


def _npu_paged_attention(
    query, key_cache, value_cache, num_kv_heads, num_heads, scale_value, block_table, context_lens, out
) -> None:
    kv_heads = _check(query, key_cache, value_cache, num_kv_heads, num_heads, block_table, context_lens, out)
    num_blocks, block_size = key_cache.shape[:2]
    result, _ = fia_tnd_paged(
        query, key_cache.reshape(num_blocks, block_size, -1), value_cache.reshape(num_blocks, block_size, -1),
        atten_mask=None, actual_seq_lengths=list(range(1, query.shape[0] + 1)),
        actual_seq_lengths_kv=context_lens.tolist(), num_heads=num_heads, num_key_value_heads=kv_heads,
        scale=scale_value, pre_tokens=0, next_tokens=0, sparse_mode=0, block_table=block_table,
        block_size=block_size, names=("(one query token per sequence)", "context_lens"),
    )  # fmt: skip
    out.copy_(result)

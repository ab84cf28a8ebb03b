"""The paged paths of the emulated ``npu_fused_infer_attention_score`` (spec/ascend.md, CANN-FIA-PAGED).

Reached through ``npu_fused_infer_attention_score(..., input_layout="TND", block_table=...)``:
- ``query [T, N, D]`` packs the sequences; ``actual_seq_lengths`` holds their CUMULATIVE ends
  (B entries, non-decreasing, the last one T). **documented**.
- ``key``/``value [num_blocks, block_size, KV_N * D]`` (the "(blocknum, blocksize, H)" cache
  layout), with identical shapes (so value heads cannot be narrower than key heads). **documented**.
- ``block_table`` int32 ``[B, >= max blocks per sequence]``; ``block_size`` is the cache's second
  dim. ``actual_seq_lengths_kv`` is required and holds each sequence's OWN length. **documented**
  (the per-sequence kv lengths: **inferred**, see CANN-FIA-PAGED).
- ``sparse_mode`` 0 without a mask (no restriction), 3 (causal from the bottom-right of EACH
  sequence, d_b = kv_len_b - q_len_b) or 4 (band from the same corner), both with the 2048x2048
  compressed mask; for every sequence, query length 1 included: the query-length-1 caveat (CANN-FIA-DECODE)
  names BSH/BSND/BNSD only, so it does not cover TND (**inferred** from its wording). Mode 4 under
  TND: **emulator choice** (see the section).

And through ``input_layout="BSND", block_table=...`` with query ``[B, 1, N, D]`` (``fia_bsnd_paged_decode``):
the decode call the caveat covers (BSND, Q_S = 1, QK_D = V_D since key and value have identical
shapes, no rope inputs), so ``sparse_mode``, ``pre_tokens`` and ``next_tokens`` are ignored and only an
explicit ``atten_mask`` ``(B, KV_S)`` or ``(B, 1, 1, KV_S)`` (KV_S >= the table's columns x block_size)
and the kv lengths apply. **documented** (the caveat); query lengths other than 1: not emulated.
- Only the table entries ``< ceil(kv_len_b / block_size)`` and the positions ``< kv_len_b`` are
  read, so stale cache content never reaches the output. Ids outside the cache raise here (the
  real op does not check them). Violations raise RuntimeError.
"""

from __future__ import annotations

import operator

import torch

from backends.npu_emulator.compressed_mask import is_compressed_mask

COMPRESSED_MASK_SIZE = 2048
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)


def _fail(message: str):
    raise RuntimeError(f"npu_fused_infer_attention_score (TND, paged): {message}")


def int_list(value, name: str, fail) -> list[int]:
    """``actual_seq_lengths`` / ``actual_seq_lengths_kv`` as torch_npu's ``int[]`` binding takes them
    (spec/ascend.md, CANN-FIA): a list or tuple of Python or numpy integers, a 1-D numpy integer
    array, or a 1-D integer tensor. Anything else (floats, bools, nesting) calls ``fail``."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
            fail(f"{name} must be a 1-D integer list, got {value.dtype} {tuple(value.shape)}")
        return value.tolist()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__") or getattr(value, "ndim", 1) != 1:
        fail(f"{name} must be a 1-D integer list, got {value!r}")
    values = []
    for v in value:
        if isinstance(v, bool) or type(v).__name__ == "bool_":
            fail(f"{name} must hold ints, got {list(value)}")
        try:
            values.append(operator.index(v))  # int, and numpy's integer scalars (not floats)
        except TypeError:
            fail(f"{name} must hold ints, got {list(value)}")
    return values


def _int_list(value, name: str) -> list[int]:
    """A list of ints (see ``int_list``); raises when missing."""
    if value is None:
        _fail(f"{name} is required with input_layout='TND' and a block_table")
    return int_list(value, name, _fail)


def _check_compressed_mask(atten_mask) -> None:
    shape = tuple(getattr(atten_mask, "shape", ()))
    size = (COMPRESSED_MASK_SIZE, COMPRESSED_MASK_SIZE)
    if atten_mask is None or shape[-2:] != size or any(s != 1 for s in shape[:-2]):
        _fail(f"sparse_mode 3/4 needs the compressed {COMPRESSED_MASK_SIZE}x{COMPRESSED_MASK_SIZE} mask")
    if not is_compressed_mask(atten_mask):
        _fail("the compressed mask must be True exactly strictly above the diagonal")


def _lengths(query, actual_seq_lengths, actual_seq_lengths_kv, block_table, names) -> tuple[list, list, list]:
    """Query starts (B + 1), query lengths and kv lengths, checked against T and the table's rows;
    ``names`` are the op's own names of the two length arguments (v1's or v2's, CANN-FIA-V2)."""
    ends = _int_list(actual_seq_lengths, names[0])
    kv_lens = _int_list(actual_seq_lengths_kv, names[1])
    starts = [0, *ends]
    if not ends or any(b < a for a, b in zip(starts, ends, strict=False)) or ends[-1] != query.shape[0]:
        _fail(f"{names[0]} must be cumulative non-decreasing ends up to T={query.shape[0]}: {ends}")
    if len(kv_lens) != len(ends) or any(n < 0 for n in kv_lens):
        _fail(f"{names[1]} must be {len(ends)} lengths >= 0, got {kv_lens}")
    shape = tuple(getattr(block_table, "shape", ()))
    if not isinstance(block_table, torch.Tensor) or len(shape) != 2 or shape[0] != len(ends):
        _fail(f"block_table must be 2-D with B={len(ends)} rows, got {shape}")
    q_lens = [b - a for a, b in zip(starts, ends, strict=False)]
    return starts, q_lens, kv_lens


def _check_cache(key, value, block_table, block_size, kv_lens, kv_heads, head_dim) -> None:
    """The documented paged layout, block_size, and the table entries that will be read."""
    if key.dim() != 3 or tuple(value.shape) != tuple(key.shape):
        _fail(f"key/value must be equal [blocknum, blocksize, H]: {tuple(key.shape)}, {tuple(value.shape)}")
    if key.shape[2] != kv_heads * head_dim:
        _fail(f"key's last dim {key.shape[2]} is not num_key_value_heads * D = {kv_heads} * {head_dim}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size != key.shape[1]:
        _fail(f"block_size={block_size!r} must be the cache's block size {key.shape[1]}")
    if block_table.dim() != 2 or block_table.dtype != torch.int32:
        _fail(f"block_table must be a 2-D int32 tensor, got {getattr(block_table, 'dtype', block_table)}")
    needed = max(-(-n // block_size) for n in kv_lens)
    if needed > block_table.shape[1]:
        _fail(f"block_table has {block_table.shape[1]} columns, the kv lengths need {needed}")
    for b, n in enumerate(kv_lens):
        ids = block_table[b, : -(-n // block_size)]
        if bool(((ids < 0) | (ids >= key.shape[0])).any()):
            _fail(f"block_table[{b}] reads block ids {ids.tolist()} outside 0..{key.shape[0] - 1}")


def _gather(cache, table_row, block_size: int, length: int, heads: int) -> torch.Tensor:
    """Positions 0..length-1 of one sequence as [heads, length, D] in float32; only its blocks are read."""
    ids = table_row[: -(-length // block_size)].long()
    rows = cache.index_select(0, ids.to(cache.device)).flatten(0, 1)[:length]
    return rows.float().reshape(length, heads, -1).transpose(0, 1)


def _decode_mask(atten_mask, batch: int, width: int) -> torch.Tensor | None:
    """The query-length-1 call's explicit mask as bool [B, S] (True = masked), or None."""
    if atten_mask is None:
        return None
    if not isinstance(atten_mask, torch.Tensor) or atten_mask.dtype not in MASK_DTYPES:
        _fail(f"atten_mask must be bool/int8/uint8 (True = masked): {getattr(atten_mask, 'dtype', None)}")
    if atten_mask.dim() not in (2, 3, 4) or atten_mask.shape[0] != batch or atten_mask.shape[-1] < width:
        _fail(f"atten_mask must be [B, S] or [B, 1, 1, S] with S >= {width}, got {tuple(atten_mask.shape)}")
    return atten_mask.reshape(batch, -1).cpu().bool()


def _prompt_masked(sparse_mode, pre_tokens, next_tokens, q_len: int, kv_len: int) -> torch.Tensor:
    """[q_len, kv_len] bool, True = masked, for one sequence of a prompt-kernel call."""
    i = torch.arange(q_len)[:, None] + (kv_len - q_len)  # bottom-right alignment per sequence
    j = torch.arange(kv_len)[None, :]
    if sparse_mode == 0:
        return torch.zeros(q_len, kv_len, dtype=torch.bool)
    if sparse_mode == 3:
        return j > i
    return (j < i - pre_tokens) | (j > i + next_tokens)


def _probs(scores, masked, sink) -> torch.Tensor:
    """Softmax over the unmasked keys of [N, q_len, kv_len] scores; a row with none is zeros. With a
    ``sink`` [N] (v2's learnable_sink, CANN-FIA-V2: documented by the vendor's golden) head h's logit
    sink[h] is one more column of the softmax, dropped before the value product: exp(sink) joins the
    head's denominator only."""
    scores = scores.masked_fill(masked, float("-inf"))
    if sink is None:
        empty = masked.all(-1, keepdim=True)
        return torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(masked, 0.0)
    sink = sink.float().to(scores.device)[:, None, None]
    peak = torch.maximum(scores.amax(-1, keepdim=True), sink)
    weights = torch.exp(scores - peak)  # masked keys: exp(-inf) = 0
    return weights / (weights.sum(-1, keepdim=True) + torch.exp(sink - peak))


def fia_tnd_paged(
    query, key, value, *, atten_mask, actual_seq_lengths, actual_seq_lengths_kv, num_heads,
    num_key_value_heads, scale, pre_tokens, next_tokens, sparse_mode, block_table, block_size,
    learnable_sink=None, names=("actual_seq_lengths", "actual_seq_lengths_kv"), decode_caveat=False,
):  # fmt: skip
    """FIA with input_layout='TND' and a block_table: (attention_out [T, N, D], softmax_lse [1]).
    ``learnable_sink`` [N] is the v2 op's (None for v1); ``names`` its length arguments' names;
    ``decode_caveat``: the BSND query-length-1 call (sparse_mode and the band ignored, explicit mask)."""
    if query.dim() != 3 or query.shape[1] != num_heads:
        _fail(f"query must be [T, N={num_heads}, D], got {tuple(query.shape)}")
    kv_heads = num_heads if num_key_value_heads == 0 else num_key_value_heads
    if num_heads % kv_heads:
        _fail(f"num_heads={num_heads} is not a multiple of num_key_value_heads={kv_heads}")
    head_dim = query.shape[2]
    starts, q_lens, kv_lens = _lengths(query, actual_seq_lengths, actual_seq_lengths_kv, block_table, names)
    _check_cache(key, value, block_table, block_size, kv_lens, kv_heads, head_dim)
    if decode_caveat:  # CANN-FIA-DECODE: sparse_mode, pre_tokens and next_tokens invalid
        explicit = _decode_mask(atten_mask, len(q_lens), block_table.shape[1] * block_size)
    elif sparse_mode in (3, 4):
        _check_compressed_mask(atten_mask)
    elif sparse_mode != 0 or atten_mask is not None:
        _fail(f"TND takes sparse_mode 0 without a mask, 3 or 4; got {sparse_mode!r} with a mask or not")
    out = torch.zeros(query.shape[0], num_heads, head_dim, dtype=torch.float32, device=query.device)
    group = num_heads // kv_heads
    for b, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens, strict=True)):
        if q_len == 0 or kv_len == 0:
            continue  # no rows, or no keys: zeros
        k = _gather(key, block_table[b], block_size, kv_len, kv_heads).repeat_interleave(group, 0)
        v = _gather(value, block_table[b], block_size, kv_len, kv_heads).repeat_interleave(group, 0)
        if decode_caveat:
            none = torch.zeros(1, kv_len, dtype=torch.bool)
            masked = none if explicit is None else explicit[b : b + 1, :kv_len]
        else:
            masked = _prompt_masked(sparse_mode, pre_tokens, next_tokens, q_len, kv_len)
        masked = masked.to(query.device)
        rows = query[starts[b] : starts[b + 1]].float().transpose(0, 1)  # [N, q_len, D]
        probs = _probs(rows @ k.transpose(-1, -2) * scale, masked, learnable_sink)
        empty = masked.all(-1, keepdim=True)
        out[starts[b] : starts[b + 1]] = (probs @ v).masked_fill(empty, 0.0).transpose(0, 1)
    return out.to(query.dtype), torch.zeros(1, dtype=torch.float32, device=query.device)


def fia_bsnd_paged_decode(query, key, value, *, atten_mask, actual_seq_lengths_kv, num_heads,
                          num_key_value_heads, scale, block_table, block_size):  # fmt: skip
    """FIA with input_layout='BSND', a block_table and query [B, 1, N, D]: (attention_out [B, 1, N, D],
    softmax_lse [1]), under the query-length-1 caveat (CANN-FIA-DECODE): only the explicit mask and
    the kv lengths restrict the keys; sparse_mode, pre_tokens and next_tokens are not read."""
    if query.dim() != 4 or query.shape[1] != 1:
        _fail(f"input_layout 'BSND' with a block_table is emulated for query [B, 1, N, D] only, got "
              f"{tuple(query.shape)}")  # fmt: skip
    batch = query.shape[0]
    out, lse = fia_tnd_paged(
        query[:, 0], key, value, atten_mask=atten_mask, actual_seq_lengths=list(range(1, batch + 1)),
        actual_seq_lengths_kv=actual_seq_lengths_kv, num_heads=num_heads,
        num_key_value_heads=num_key_value_heads, scale=scale, pre_tokens=None, next_tokens=None,
        sparse_mode=None, block_table=block_table, block_size=block_size, decode_caveat=True,
    )  # fmt: skip
    return out[:, None], lse

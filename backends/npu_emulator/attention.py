"""Emulated ``torch_npu.npu_fused_infer_attention_score`` (FIA), as documented (spec/ascend.md, CANN-FIA).

    npu_fused_infer_attention_score(query, key, value, *, atten_mask=None,
        actual_seq_lengths=None, actual_seq_lengths_kv=None, num_heads=1, scale=1.0,
        pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH",
        num_key_value_heads=0, sparse_mode=0, block_table=None, block_size=0, **unsupported)
        -> (attention_out, softmax_lse)

Semantics: ``softmax(scale * Q K^T + mask) V`` over the keys that survive every restriction:
- ``atten_mask`` polarity: True (or 1) = MASKED OUT. Only bool / int8 / uint8 masks are
  accepted; a float mask raises, as the real op does.
- ``scale`` defaults to 1.0 (NOT 1/sqrt(D)): callers must pass it.
- ``num_heads`` must equal the query's head count; ``num_key_value_heads`` 0 means num_heads.
- ``actual_seq_lengths_kv[b]``: keys at or beyond it are not read at all (zeros, never NaN).
  ``actual_seq_lengths[b]``: query rows at or beyond it return zeros.
- Query length 1 in BNSD (or paged BSND): ``pre_tokens``, ``next_tokens`` and ``sparse_mode`` are
  IGNORED; only ``atten_mask`` and ``actual_seq_lengths_kv`` apply. The documented condition is
  narrower than "query length 1": layout BSH, BSND or BNSD, Q_S = 1, QK_D = V_D and no rope inputs
  (spec/ascend.md, CANN-FIA-DECODE); every emulated BNSD/BSND call meets the last two (key and value
  have one shape, the query's D; no rope input is emulated). TND is outside it (paged_attention.py).
- Query length > 1, per ``sparse_mode`` (d = kv_len - q_len per batch, actual lengths):
  0: ``atten_mask`` optional, applied in full ([Sq, Sk] or [B, 1, Sq, Sk]), plus the top-left
     band i - pre_tokens <= j <= i + next_tokens;
  1: ``atten_mask`` in full, pre/next ignored;
  2: causal from the top-left (j <= i);
  3: causal from the bottom-right (j <= i + d);
  4: band from the bottom-right (i + d - pre_tokens <= j <= i + d + next_tokens).
  Modes 2, 3 and 4 require the compressed mask: exactly [2048, 2048] with the upper triangle
  strictly above the diagonal True; anything else raises.
- Rows with no surviving key return zeros (the real kernel's value there is undocumented; the
  contracts never compare such rows). Computed in float32, rounded once to the query dtype.
- Layout: "BNSD" without paging, "TND" with a ``block_table``, and "BSND" with a ``block_table`` at
  query length 1 (the paged paths, in ``paged_attention.py``, spec/ascend.md CANN-FIA-PAGED); others
  raise.
- Dtypes: float16, bfloat16 as the real op, plus float32 (an emulator extension, so adapter
  logic is checked at float32 precision).

Violations raise RuntimeError, as the real op does.
"""

from __future__ import annotations

import torch

from backends.npu_emulator.compressed_mask import is_compressed_mask
from backends.npu_emulator.paged_attention import fia_bsnd_paged_decode, fia_tnd_paged, int_list

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
COMPRESSED_MASK_SIZE = 2048
MAX_TOKENS = 2147483647


def _fail(message: str):
    raise RuntimeError(f"npu_fused_infer_attention_score: {message}")


def _lengths(value, batch: int, default: int, name: str) -> torch.Tensor:
    if value is None:
        return torch.full((batch,), default, dtype=torch.int64)
    lengths = torch.tensor(int_list(value, name, _fail), dtype=torch.int64)
    if lengths.numel() != batch:
        _fail(f"{name} must have one entry per batch ({batch}), got {lengths.tolist()}")
    if bool((lengths < 0).any()) or bool((lengths > default).any()):
        _fail(f"{name} entries must lie in 0..{default}, got {lengths.tolist()}")
    return lengths.to(torch.int64)


def _check_compressed_mask(atten_mask) -> None:
    if atten_mask is None or tuple(atten_mask.shape) != (COMPRESSED_MASK_SIZE, COMPRESSED_MASK_SIZE):
        _fail(f"sparse_mode 2/3/4 needs the compressed {COMPRESSED_MASK_SIZE}x{COMPRESSED_MASK_SIZE} mask")
    if not is_compressed_mask(atten_mask):
        _fail("the compressed mask must be True exactly strictly above the diagonal")


def _masked_by_mode(sparse_mode, atten_mask, pre_tokens, next_tokens, q_len, kv_len, q_lens, kv_lens, batch):
    """[B, 1, Sq, Sk] bool, True = masked, for query length > 1."""
    i = torch.arange(q_len)[None, None, :, None]
    j = torch.arange(kv_len)[None, None, None, :]
    if sparse_mode in (0, 1):
        masked = torch.zeros(batch, 1, q_len, kv_len, dtype=torch.bool)
        if atten_mask is not None:
            try:
                masked = masked | atten_mask.cpu().bool().reshape(-1, 1, q_len, kv_len)
            except RuntimeError:
                _fail(f"atten_mask of shape {tuple(atten_mask.shape)} does not fit [B, 1, {q_len}, {kv_len}]")
        elif sparse_mode == 1:
            _fail("sparse_mode 1 needs a full atten_mask")
        if sparse_mode == 0:
            masked = masked | (j < i - pre_tokens) | (j > i + next_tokens)
        return masked
    _check_compressed_mask(atten_mask)
    if sparse_mode == 2:
        return (j > i).expand(batch, 1, q_len, kv_len)
    offset = (kv_lens - q_lens)[:, None, None, None]  # bottom-right alignment, per batch
    if sparse_mode == 3:
        return j > i + offset
    if sparse_mode == 4:
        return (j < i + offset - pre_tokens) | (j > i + offset + next_tokens)
    _fail(f"sparse_mode must be 0..4, got {sparse_mode!r}")


def npu_fused_infer_attention_score(
    query,
    key,
    value,
    *,
    atten_mask=None,
    actual_seq_lengths=None,
    actual_seq_lengths_kv=None,
    num_heads=1,
    scale=1.0,
    pre_tokens=MAX_TOKENS,
    next_tokens=MAX_TOKENS,
    input_layout="BSH",
    num_key_value_heads=0,
    sparse_mode=0,
    block_table=None,
    block_size=0,
    **unsupported,
):
    if unsupported:
        _fail(f"arguments not emulated: {sorted(unsupported)}")
    if input_layout in ("TND", "BSND") and block_table is not None:
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            if not isinstance(tensor, torch.Tensor) or tensor.dtype not in SUPPORTED_DTYPES:
                _fail(f"{name} must be a float16/bfloat16/float32 tensor")
        if key.dtype != query.dtype or value.dtype != query.dtype:
            _fail("key and value must have the query's dtype")
        if input_layout == "BSND":  # actual_seq_lengths, sparse_mode, pre/next tokens: not read at Q_S = 1
            return fia_bsnd_paged_decode(
                query, key, value, atten_mask=atten_mask, actual_seq_lengths_kv=actual_seq_lengths_kv,
                num_heads=num_heads, num_key_value_heads=num_key_value_heads, scale=scale,
                block_table=block_table, block_size=block_size,
            )  # fmt: skip
        return fia_tnd_paged(
            query, key, value, atten_mask=atten_mask, actual_seq_lengths=actual_seq_lengths,
            actual_seq_lengths_kv=actual_seq_lengths_kv, num_heads=num_heads,
            num_key_value_heads=num_key_value_heads, scale=scale, pre_tokens=pre_tokens,
            next_tokens=next_tokens, sparse_mode=sparse_mode, block_table=block_table, block_size=block_size,
        )  # fmt: skip
    if input_layout != "BNSD" or block_table is not None:
        _fail(f"emulated: 'BNSD' without paging, 'TND' or 'BSND' with a block_table; got {input_layout!r}")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 4 or tensor.dtype not in SUPPORTED_DTYPES:
            _fail(f"{name} must be a 4-D float16/bfloat16/float32 tensor in BNSD")
    if key.dtype != query.dtype or value.dtype != query.dtype or key.shape != value.shape:
        _fail("key and value must have the query's dtype and equal shapes")
    batch, heads, q_len, head_dim = query.shape
    kv_heads_expected = num_heads if num_key_value_heads == 0 else num_key_value_heads
    if heads != num_heads:
        _fail(f"num_heads={num_heads} does not match the query's {heads} heads")
    if key.shape[1] != kv_heads_expected or num_heads % kv_heads_expected:
        _fail(f"num_key_value_heads={num_key_value_heads} does not fit key heads {key.shape[1]}")
    if key.shape[0] != batch or key.shape[3] != head_dim:
        _fail(f"key shape {tuple(key.shape)} does not fit query {tuple(query.shape)}")
    if atten_mask is not None and (
        not isinstance(atten_mask, torch.Tensor) or atten_mask.dtype not in MASK_DTYPES
    ):
        _fail(
            "atten_mask must be bool or int8 (True/1 = masked), "
            f"got {getattr(atten_mask, 'dtype', atten_mask)}"
        )
    kv_len = key.shape[2]
    q_lens = _lengths(actual_seq_lengths, batch, q_len, "actual_seq_lengths")
    kv_lens = _lengths(actual_seq_lengths_kv, batch, kv_len, "actual_seq_lengths_kv")

    if q_len == 1:  # BNSD, QK_D = V_D, no rope (CANN-FIA-DECODE): pre/next tokens and sparse_mode invalid
        masked = torch.zeros(batch, 1, 1, kv_len, dtype=torch.bool)
        if atten_mask is not None:
            try:
                masked = masked | atten_mask.cpu().bool().reshape(-1, 1, 1, kv_len)
            except RuntimeError:
                _fail(f"atten_mask of shape {tuple(atten_mask.shape)} does not fit [B, 1, 1, {kv_len}]")
    else:
        masked = _masked_by_mode(
            sparse_mode, atten_mask, pre_tokens, next_tokens, q_len, kv_len, q_lens, kv_lens, batch
        )
    in_length = torch.arange(kv_len)[None, :] < kv_lens[:, None]  # [B, Sk]
    masked = masked | ~in_length[:, None, None, :]
    masked = masked.to(query.device)

    group = heads // key.shape[1]
    keep = in_length.to(query.device)[:, None, :, None]
    k = torch.where(keep, key.float(), 0.0).repeat_interleave(group, dim=1)  # not read beyond the length
    v = torch.where(keep, value.float(), 0.0).repeat_interleave(group, dim=1)
    scores = (query.float() @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(masked, float("-inf"))
    empty = masked.all(-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(masked, 0.0)
    out = probs @ v
    out = out.masked_fill(empty, 0.0)
    valid_rows = (torch.arange(q_len)[None, :] < q_lens[:, None]).to(query.device)[:, None, :, None]
    out = torch.where(valid_rows, out, 0.0)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return out.to(query.dtype), lse

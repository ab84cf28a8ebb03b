"""Oracles for the attention contracts (clauses ATTN-*, PREFILL-DECODE).

Float64 throughout. ``attention`` works in blocks of query rows, so its extra memory is
O(block x Sk) per head instead of O(Sq x Sk); within a block it reads only the span of keys
that some query of the block may see (exact: a key outside every row's mask contributes a
probability of exactly zero). tests/test_reference_attention.py proves the blocked result
equal to the one-block definition and to a per-element brute force.
"""

from __future__ import annotations

import math

import torch

from reference.masks import encoder_attention_mask, require_window, validate_padding_mask, validate_seq_lens
from reference.validation import require_float_tensor, require_positive_finite, require_same_dtype

__all__ = [
    "QUERY_BLOCK",
    "attention",
    "decode_attention",
    "default_scale",
    "masked_values_product",
    "prefill_attention",
    "require_scale",
    "validate_decode_args",
    "validate_prefill_args",
    "validate_prefill_qkv",
    "validate_qkv",
]

QUERY_BLOCK = 256


def validate_qkv(q, k, v) -> tuple[int, int, int, int, int, int]:
    """ATTN-ERRORS: q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D], Hq a multiple of Hkv.

    Returns B, Hq, Hkv, Sq, Sk, D.
    """
    require_float_tensor(q, "q", 4)
    require_float_tensor(k, "k", 4)
    require_float_tensor(v, "v", 4)
    require_same_dtype("q", q.dtype, k=k, v=v)
    batch, q_heads, q_len, head_dim = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(
            f"k/v must be [B={batch}, Hkv, Sk, D={head_dim}] to fit q {tuple(q.shape)}, got {tuple(k.shape)}"
        )
    kv_heads = k.shape[1]
    if q_heads % kv_heads:
        raise ValueError(f"q heads (Hq={q_heads}) must be a multiple of k/v heads (Hkv={kv_heads})")
    return batch, q_heads, kv_heads, q_len, k.shape[2], head_dim


def require_scale(scale) -> float:
    """ATTN-ERRORS: the softmax scale is a finite number > 0 (no default: ATTN-SCALE)."""
    return require_positive_finite(scale, "scale")


def default_scale(head_dim: int) -> float:
    """The usual softmax scale 1/sqrt(D) (the contracts take ``scale`` explicitly)."""
    return 1.0 / math.sqrt(head_dim)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """ATTN: softmax(scale * q k^T restricted to ``allowed``) v, in float64; shape [B, Hq, Sq, D].

    q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (BNSD, one dtype), ``scale`` explicit (ATTN-SCALE).
    ``allowed`` is bool, True = attend, broadcastable to [B, Hq, Sq, Sk]. GQA: query head h
    reads k/v head h // (Hq / Hkv). A query row with no allowed key returns zeros. A key
    that is not allowed gets probability exactly 0 (its score is never exponentiated) and its
    value is never read. ATTN-NAN: a NaN in q, or in an allowed key, makes the whole row NaN; a
    NaN in an allowed value makes that column of the row NaN; a NaN the row cannot see changes nothing.
    """
    batch, q_heads, kv_heads, q_len, kv_len, head_dim = validate_qkv(q, k, v)
    scale = require_scale(scale)
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool:
        raise ValueError(
            f"allowed must be a bool tensor (True = attend), got {getattr(allowed, 'dtype', allowed)!r}"
        )
    try:
        allowed = allowed.expand(batch, q_heads, q_len, kv_len)
    except RuntimeError:
        raise ValueError(
            f"allowed must broadcast to [B, Hq, Sq, Sk] = {[batch, q_heads, q_len, kv_len]}, "
            f"got {tuple(allowed.shape)}"
        ) from None
    group = q_heads // kv_heads
    # [B, Hkv, group, S, D]: query head h = kv_head * group + g, so no k/v copy is needed.
    q = q.detach().to(torch.float64).reshape(batch, kv_heads, group, q_len, head_dim)
    k = k.detach().to(torch.float64)[:, :, None]
    v = v.detach().to(torch.float64)[:, :, None]
    allowed = allowed.to(q.device).reshape(batch, kv_heads, group, q_len, kv_len)
    out = torch.zeros_like(q)
    for start in range(0, q_len, QUERY_BLOCK):
        rows = slice(start, min(start + QUERY_BLOCK, q_len))
        block_allowed = allowed[:, :, :, rows]
        seen = block_allowed.flatten(0, 3).any(0).nonzero()
        if seen.numel() == 0:
            continue  # no row of the block sees any key: zeros
        keys = slice(int(seen[0]), int(seen[-1]) + 1)
        block_allowed = block_allowed[..., keys]
        scores = (q[:, :, :, rows] @ k[..., keys, :].transpose(-1, -2)) * scale
        scores = scores.masked_fill(~block_allowed, float("-inf"))
        row_max = scores.amax(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).min)
        weights = torch.exp(scores - row_max)  # exp(-inf) = 0 for every key not allowed
        # ATTN-NAN: a visible NaN score makes its row's total NaN and so every probability NaN; only
        # a row with no allowed key is zeros by definition (0 / 0 there is replaced, nothing else).
        empty = ~block_allowed.any(-1, keepdim=True)
        probs = (weights / weights.sum(-1, keepdim=True)).masked_fill(empty, 0.0)
        out[:, :, :, rows] = masked_values_product(probs, v[..., keys, :], block_allowed)
    return out.reshape(batch, q_heads, q_len, head_dim)


def masked_values_product(probs: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """ATTN-NAN: probs @ values where a value that is not allowed is never read (no 0 * NaN or
    0 * inf) and a NaN value reaches exactly the rows that allow its key, in its column.

    probs [..., R, K] (exactly 0 where not allowed), values [..., K, D], allowed broadcastable to
    probs. An allowed +-inf value adds +-inf to its column (NaN with both signs or a NaN), as
    p * v does for the p > 0 that every allowed key has.
    """
    bad = ~torch.isfinite(values)
    if not bool(bad.any()):
        return probs @ values
    out = probs @ values.masked_fill(bad, 0.0)
    allowed = allowed.to(values.dtype)

    def hits(which: torch.Tensor) -> torch.Tensor:  # [..., R, D]: rows that allow such a value
        return (allowed @ which.to(values.dtype)) > 0

    nan, pos, neg = hits(torch.isnan(values)), hits(values == float("inf")), hits(values == float("-inf"))
    term = torch.where(pos, float("inf"), 0.0) + torch.where(neg, float("-inf"), 0.0)
    return out + term.masked_fill(nan, float("nan"))


def validate_prefill_qkv(q, k, v) -> tuple[int, int]:
    """ATTN-ERRORS for prefill: q/k/v fit (validate_qkv) and Sq = Sk; returns (B, S).
    Shared by the oracle and the backends, so all raise the same errors."""
    batch, _, _, q_len, kv_len, _ = validate_qkv(q, k, v)
    if q_len != kv_len:
        raise ValueError(f"prefill needs q and k/v of one length S, got Sq={q_len} and Sk={kv_len}")
    return batch, q_len


def validate_prefill_args(q, k, v, *, sliding_window, padding_mask):
    """ATTN-ERRORS for prefill: q/k/v fit with Sq = Sk = S (validate_prefill_qkv), the window is
    None or >= 1, the padding mask is None or a valid [B, S] mask with B = q's batch. Returns
    (B, S, sliding_window, padding_mask) normalized (the padding mask as bool). Shared with backends."""
    batch, q_len = validate_prefill_qkv(q, k, v)
    sliding_window = require_window(sliding_window)
    if padding_mask is not None:
        padding_mask = validate_padding_mask(padding_mask, q_len)
        if padding_mask.shape[0] != batch:
            raise ValueError(f"padding_mask must have B={batch} rows, got {padding_mask.shape[0]}")
    return batch, q_len, sliding_window, padding_mask


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    sliding_window: int | None,
    padding_mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """ATTN-PREFILL: ATTN with allowed = MASK-ENC(S, sliding_window, padding_mask); Sq = Sk = S.

    q [B, Hq, S, D], k and v [B, Hkv, S, D] (BNSD, one dtype; Hq a multiple of Hkv, GQA);
    ``padding_mask`` None or [B, S] (True / 1 = a real key token); returns [B, Hq, S, D] float64.
    Rows of padded query tokens are unspecified (the properties exclude them).
    """
    _, q_len, sliding_window, padding_mask = validate_prefill_args(
        q, k, v, sliding_window=sliding_window, padding_mask=padding_mask
    )
    allowed = encoder_attention_mask(
        q_len, sliding_window=sliding_window, padding_mask=padding_mask, device=q.device
    )
    return attention(q, k, v, allowed=allowed, scale=scale)


def validate_decode_args(q, k_cache, v_cache, seq_lens, *, sliding_window):
    """ATTN-ERRORS for decode: q [B, Hq, 1, D] fits the cache, seq_lens has B valid lengths, the
    window is None or >= 1; returns (seq_lens, sliding_window) normalized. Shared with backends."""
    _, _, _, q_len, kv_len, _ = validate_qkv(q, k_cache, v_cache)
    if q_len != 1:
        raise ValueError(f"q must be [B, Hq, 1, D] (one token per sequence), got {tuple(q.shape)}")
    sliding_window = require_window(sliding_window)
    seq_lens = validate_seq_lens(seq_lens, kv_len)
    if seq_lens.shape[0] != q.shape[0]:
        raise ValueError(f"seq_lens must have B={q.shape[0]} entries, got {seq_lens.shape[0]}")
    return seq_lens, sliding_window


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sliding_window: int | None,
    scale: float,
) -> torch.Tensor:
    """ATTN-DECODE: q [B, Hq, 1, D] is the token at position L - 1 of each sequence (L = seq_lens[b]).

    It attends cache positions max(0, L - W) <= j <= L - 1 (all j <= L - 1 without a window):
    row L - 1 of ATTN-PREFILL. Cache rows at or beyond L are not part of the sequence; they
    are removed before any arithmetic, so NaN or huge values there cannot influence the result.
    """
    seq_lens, sliding_window = validate_decode_args(
        q, k_cache, v_cache, seq_lens, sliding_window=sliding_window
    )
    kv_len = k_cache.shape[2]
    window = kv_len if sliding_window is None else sliding_window
    # Per sequence, only the visible rows max(0, L - W) .. L - 1 are read and upcast, so the extra
    # memory is O(W) per sequence rather than a float64 copy of the whole cache.
    outputs = []
    for b, length in enumerate(seq_lens.tolist()):
        start = max(0, length - window)
        keys = k_cache[b : b + 1, :, start:length].detach().to(torch.float64)
        values = v_cache[b : b + 1, :, start:length].detach().to(torch.float64)
        visible = torch.ones(1, 1, 1, length - start, dtype=torch.bool, device=q.device)
        query = q[b : b + 1].detach().to(torch.float64)  # exact; one dtype with keys (ATTN-ERRORS)
        outputs.append(attention(query, keys, values, allowed=visible, scale=scale))
    return torch.cat(outputs)

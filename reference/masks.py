"""Oracles for the attention-mask contracts (clauses MASK-*, WINDOW-CONV).

Masks are boolean. Two polarities exist in the field and both appear here, each named:
``encoder_attention_mask`` returns True = the query may attend the key (SDPA, FlexAttention);
``swa_decode_mask`` returns True = the key is masked out (Ascend FIA). Every function builds
its result by broadcasting comparisons of index vectors, so no intermediate is larger than the
mask it returns (and none is an integer matrix).
"""

from __future__ import annotations

import torch

from reference.validation import require_int

__all__ = [
    "CANN_MAX_TOKENS",
    "additive_mask",
    "cann_prefill_tokens",
    "decode_mask_window",
    "encoder_attention_mask",
    "flash_attention_window",
    "require_window",
    "swa_decode_mask",
    "validate_encoder_mask_args",
    "validate_padding_mask",
    "validate_seq_lens",
    "validate_swa_decode_args",
]

# The "no limit" value of CANN's pre_tokens / next_tokens (their documented default).
CANN_MAX_TOKENS = 2147483647


def require_window(value, name: str = "sliding_window", *, optional: bool = True) -> int | None:
    """MASK-ERRORS: a window is None (no window, when ``optional``) or an int >= 1."""
    if value is None and optional:
        return None
    return require_int(value, name, minimum=1)


def validate_padding_mask(padding_mask, seq_len: int, name: str = "padding_mask") -> torch.Tensor:
    """MASK-ERRORS: a [B, S] tensor of bool, or of integers that are all 0 or 1. Returns it as bool."""
    if not isinstance(padding_mask, torch.Tensor):
        raise ValueError(f"{name} must be a [B, {seq_len}] bool or 0/1 integer tensor, got {padding_mask!r}")
    if padding_mask.dim() != 2 or padding_mask.shape[1] != seq_len or padding_mask.shape[0] < 1:
        raise ValueError(
            f"{name} must have shape [B, {seq_len}] with B >= 1, got {tuple(padding_mask.shape)}"
        )
    if padding_mask.dtype == torch.bool:
        return padding_mask
    if padding_mask.is_floating_point() or padding_mask.is_complex():
        raise ValueError(f"{name} must be bool or a 0/1 integer tensor, got dtype {padding_mask.dtype}")
    if not bool(((padding_mask == 0) | (padding_mask == 1)).all()):
        raise ValueError(f"{name} integer values must all be 0 or 1")
    return padding_mask != 0


def validate_seq_lens(seq_lens, kv_len: int, name: str = "seq_lens") -> torch.Tensor:
    """MASK-ERRORS: a 1-D integer tensor with every length L in 1 <= L <= kv_len."""
    if (
        not isinstance(seq_lens, torch.Tensor)
        or seq_lens.dim() != 1
        or seq_lens.numel() < 1
        or seq_lens.dtype == torch.bool
        or seq_lens.is_floating_point()
        or seq_lens.is_complex()
    ):
        raise ValueError(f"{name} must be a non-empty 1-D integer tensor, got {seq_lens!r}")
    if bool((seq_lens < 1).any()) or bool((seq_lens > kv_len).any()):
        raise ValueError(f"{name} must all lie in 1..kv_len={kv_len}, got {seq_lens.tolist()}")
    return seq_lens


def validate_encoder_mask_args(seq_len, sliding_window, padding_mask, device):
    """MASK-ERRORS for encoder_attention_mask's arguments; returns them normalized, with the device
    defaulting to the padding mask's. Shared by the oracle and the backends (same errors)."""
    seq_len = require_int(seq_len, "seq_len", minimum=1)
    sliding_window = require_window(sliding_window)
    if padding_mask is not None:
        padding_mask = validate_padding_mask(padding_mask, seq_len)
        device = padding_mask.device if device is None else device
    return seq_len, sliding_window, padding_mask, device


def encoder_attention_mask(
    seq_len: int,
    *,
    sliding_window: int | None = None,
    padding_mask: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """MASK-ENC: True = query i may attend key j, iff j <= i, i - j < sliding_window, padding_mask[b, j].

    Shape [S, S] without a padding mask, [B, 1, S, S] with one; dtype bool (MASK-DTYPE). The
    window counts visible keys including the query itself (the HF convention): W = 1 is the
    diagonal only. The padding mask applies to KEYS only; rows of padded queries follow the
    same rule (they may be empty, e.g. under left padding).
    """
    seq_len, sliding_window, padding_mask, device = validate_encoder_mask_args(
        seq_len, sliding_window, padding_mask, device
    )
    query = torch.arange(seq_len, device=device)[:, None]
    key = torch.arange(seq_len, device=device)[None, :]
    allowed = key <= query
    if sliding_window is not None:
        allowed &= key > query - sliding_window  # i - j < W, written without an [S, S] int matrix
    if padding_mask is None:
        return allowed
    return allowed[None, None] & padding_mask.to(allowed.device)[:, None, None, :]


def validate_swa_decode_args(seq_lens, kv_len, window):
    """MASK-ERRORS for swa_decode_mask's arguments; returns (seq_lens, kv_len, window) normalized.
    Shared by the oracle and the backends (same errors)."""
    kv_len = require_int(kv_len, "kv_len", minimum=1)
    window = require_window(window, "window", optional=False)
    return validate_seq_lens(seq_lens, kv_len), kv_len, window


def swa_decode_mask(seq_lens: torch.Tensor, kv_len: int, *, window: int) -> torch.Tensor:
    """MASK-SWA-DECODE: bool [B, 1, kv_len], True = MASKED OUT (the Ascend polarity).

    For a sequence of length L (the decoded token is at position L - 1) the visible keys are
    max(0, L - window) <= j <= L - 1; everything else, including cache rows at or beyond L,
    is True. ``window`` is the canonical W of MASK-ENC (see decode_mask_window).
    """
    seq_lens, kv_len, window = validate_swa_decode_args(seq_lens, kv_len, window)
    key = torch.arange(kv_len, device=seq_lens.device)
    last = seq_lens[:, None] - 1
    masked = key < last - (window - 1)  # before the window
    masked |= key > last  # after the token: not part of the sequence
    return masked[:, None, :]


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """ATTN-FLOAT-MASK: the only float mask form the suite allows: 0 where ``allowed``, -inf
    elsewhere, in the QUERY's dtype ``dtype`` (SDPA adds it to the scores)."""
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool:
        raise ValueError(f"allowed must be a bool tensor, got {getattr(allowed, 'dtype', allowed)!r}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))


# WINDOW-CONV: the canonical window W (MASK-ENC) in each API's terms.


def flash_attention_window(sliding_window: int | None) -> tuple[int, int]:
    """WINDOW-CONV: FlashAttention ``window_size=(left, right)`` for W: (W - 1, 0).

    FlashAttention keeps keys i - left <= j <= i + right (inclusive, bottom-right aligned), so
    left = W - 1 keeps W keys. No window: (-1, 0) (FlashAttention's "unbounded left", causal).
    """
    sliding_window = require_window(sliding_window)
    return (-1, 0) if sliding_window is None else (sliding_window - 1, 0)


def cann_prefill_tokens(sliding_window: int | None) -> dict:
    """WINDOW-CONV: Ascend FIA band arguments for W: pre_tokens = W - 1, next_tokens = 0.

    FIA keeps i + d - pre_tokens <= j <= i + d + next_tokens (inclusive, d = kv_len - q_len
    in sparse_mode 3/4), so pre_tokens = W - 1 keeps W keys; pre_tokens = W keeps W + 1 (the
    Step-3.5 prefill bug). No window: pre_tokens = CANN_MAX_TOKENS (the op's "unbounded").
    """
    sliding_window = require_window(sliding_window)
    pre_tokens = CANN_MAX_TOKENS if sliding_window is None else sliding_window - 1
    return {"pre_tokens": pre_tokens, "next_tokens": 0}


def decode_mask_window(sliding_window: int) -> int:
    """WINDOW-CONV: the ``window`` of swa_decode_mask (the Ascend ``left_context``) for W: W itself.

    The decode mask keeps L - window <= j <= L - 1, which is window keys; so window = W.
    """
    return require_window(sliding_window, optional=False)

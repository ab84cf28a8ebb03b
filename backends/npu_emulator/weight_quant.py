"""Emulated weight-only quant ops of torch_npu (spec/ascend.md, CANN-WEIGHT-QUANT-BMM):
``npu_weight_quant_batchmatmul`` and ``npu_convert_weight_to_int4pack``.

``npu_weight_quant_batchmatmul`` computes ``x @ ((weight + antiquant_offset) * antiquant_scale) + bias``:
the offset is *added* (the opposite sign of a zero point). x float16 / bfloat16 [M, K]; weight int8
[K, N] or int32 [K, N / 8] carrying eight signed int4 values per word (nibble i, bits 4 i .. 4 i + 3,
is column 8 c + i: inferred); antiquant_scale per tensor (1,), per channel (N,) / (1, N) or per
group (ceil(K / g), N), in x's dtype; antiquant_offset of the scale's shape and dtype; bias (N,) /
(1, N), float16 or float32 for a float16 x and float32 for a bfloat16 x. quant_scale / quant_offset
(int8 output), an int64 scale and an int32 offset are not emulated (NotImplementedError).
"""

from __future__ import annotations

import torch

__all__ = ["npu_convert_weight_to_int4pack", "npu_weight_quant_batchmatmul"]

X_DTYPES = (torch.float16, torch.bfloat16)
# CANN-WEIGHT-QUANT-BMM: x's dtype -> the bias dtypes the op takes (float32 for bfloat16 x).
BIAS_DTYPES = {torch.float16: (torch.float16, torch.float32), torch.bfloat16: (torch.float32,)}
_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int64)


def npu_convert_weight_to_int4pack(weight: torch.Tensor, inner_k_tiles: int = 0) -> torch.Tensor:
    """int32 [k, n] values in [-8, 7] (contiguous, n a multiple of 8) -> int32 [k, n / 8], value j of
    a group of 8 in nibble j as two's complement (the order is inferred, CANN-WEIGHT-QUANT-BMM)."""
    if weight.dtype != torch.int32 or weight.dim() != 2:
        raise TypeError(f"weight must be a 2-D int32 tensor, got {weight.dtype} {tuple(weight.shape)}")
    if not weight.is_contiguous() or weight.shape[1] % 8:
        raise ValueError(
            f"weight must be contiguous with its last dim a multiple of 8, got {tuple(weight.shape)}"
        )
    if weight.numel() and (weight.min() < -8 or weight.max() > 7):
        raise ValueError("weight values must lie in the int4 range [-8, 7]")
    nibbles = (weight.to(torch.int64) & 0xF).reshape(weight.shape[0], -1, 8) << _SHIFTS.to(weight.device)
    words = nibbles.sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _int4_values(words: torch.Tensor) -> torch.Tensor:
    """int32 [K, N / 8] -> int64 [K, N], nibble i of word c being column 8 c + i, read as signed int4."""
    nibbles = (words.to(torch.int64)[..., None] >> _SHIFTS.to(words.device)) & 0xF
    return torch.where(nibbles >= 8, nibbles - 16, nibbles).flatten(-2)


def _per_k_rows(t: torch.Tensor, name: str, k: int, n: int, group_size: int, dtype) -> torch.Tensor:
    """A scale / offset as [K, N] rows: per tensor, per channel, or per group of K (ceil_div groups)."""
    if t.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {t.dtype}")
    shape = tuple(t.shape)
    if group_size:
        groups = -(-k // group_size)
        if shape != (groups, n):
            raise ValueError(f"{name} must have shape {(groups, n)} for group size {group_size}, got {shape}")
        return t.repeat_interleave(group_size, dim=0)[:k]
    if shape not in ((1,), (n,), (1, n)):
        raise ValueError(f"{name} must have shape (1,), ({n},) or (1, {n}), got {shape}")
    return t.reshape(1, -1).expand(k, n)


def npu_weight_quant_batchmatmul(
    x,
    weight,
    antiquant_scale,
    antiquant_offset=None,
    quant_scale=None,
    quant_offset=None,
    bias=None,
    antiquant_group_size=0,
    inner_precise=0,
):
    """x @ ((weight + antiquant_offset) * antiquant_scale) + bias, in x's dtype: the dequantized weight
    formed in x's dtype (as the vendor's golden), the product accumulated in float32."""
    if x.dtype not in X_DTYPES or x.dim() != 2:
        raise TypeError(f"x must be a 2-D float16 or bfloat16 tensor, got {x.dtype} {tuple(x.shape)}")
    if quant_scale is not None or quant_offset is not None:
        raise NotImplementedError("the emulator covers output in x's dtype (no quant_scale / quant_offset)")
    if weight.dim() != 2 or weight.dtype not in (torch.int8, torch.int32):
        raise TypeError(
            f"weight must be a 2-D int8 or int32 (int4) tensor, got {weight.dtype} {tuple(weight.shape)}"
        )
    k = x.shape[1]
    w = weight.to(torch.int64) if weight.dtype == torch.int8 else _int4_values(weight)
    if w.shape[0] != k:
        raise ValueError(f"weight must be [K, N] (int32: [K, N / 8]) with K = {k}, got {tuple(weight.shape)}")
    n = w.shape[1]
    if not isinstance(antiquant_group_size, int) or antiquant_group_size < 0:
        raise ValueError(f"antiquant_group_size must be a non-negative int, got {antiquant_group_size!r}")
    scale = _per_k_rows(antiquant_scale, "antiquant_scale", k, n, antiquant_group_size, x.dtype)
    dequant = w.to(x.dtype)
    if antiquant_offset is not None:
        dequant = dequant + _per_k_rows(
            antiquant_offset, "antiquant_offset", k, n, antiquant_group_size, x.dtype
        )
    dequant = dequant * scale
    out = x.float() @ dequant.float()
    if bias is not None:
        if tuple(bias.shape) not in ((n,), (1, n)) or bias.dtype not in BIAS_DTYPES[x.dtype]:
            raise TypeError(f"bias must be ({n},) or (1, {n}) of a dtype in {BIAS_DTYPES[x.dtype]} for "
                            f"{x.dtype} x, got {bias.dtype} {tuple(bias.shape)}")  # fmt: skip
        out = out + bias.float().reshape(1, n)
    return out.to(x.dtype)

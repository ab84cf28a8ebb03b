"""The weight-only int4 oracle (QUANT-W4A16-*): unpacking AWQ and GPTQ checkpoints' int32 words and
the float64 GEMM of the dequantized weight. ``reference.quant`` re-exports ``w4a16_mm``.

Layouts (x [M, K], the weight [K, N] as x @ w): AWQ ``qweight`` [K, N / 8] packed along N, the 8
nibbles of a word (shifts 0, 4, ..., 28) holding columns 0, 2, 4, 6, 1, 3, 5, 7 of its group (read
back through ``AWQ_REVERSE_ORDER``); GPTQ ``qweight`` [K / 8, N] packed along K, nibble i of word r
holding row 8 r + i. ``qzeros`` [K / g, N / 8] is packed like AWQ's qweight (AWQ) or along N in order
(GPTQ); a GPTQ (v1) checkpoint stores each zero minus one, ``gptq_v2`` the zero itself. ``scales``
[K / g, N]. w[k, n] = (q[k, n] - zero[k // g, n]) * scales[k // g, n].
"""

from __future__ import annotations

import torch

from reference.validation import require_choice, require_floating, require_int, require_tensor

__all__ = ["AWQ_REVERSE_ORDER", "PACKINGS", "unpack_nibbles", "w4a16_mm", "w4a16_weight"]

PACKINGS = ("awq", "gptq", "gptq_v2")
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # column j of an 8-group is nibble AWQ_REVERSE_ORDER[j]
_SHIFTS = torch.arange(0, 32, 4)


def unpack_nibbles(words: torch.Tensor, *, dim: int, awq_order: bool) -> torch.Tensor:
    """int32 words -> int64 values 0..15, 8 per word along ``dim`` (0 or 1), in the packing's order."""
    nibbles = (words.to(torch.int64)[..., None] >> _SHIFTS.to(words.device)) & 0xF  # [..., 8]
    if awq_order:
        nibbles = nibbles[..., list(AWQ_REVERSE_ORDER)]
    if dim == 1:
        return nibbles.flatten(-2)
    return nibbles.permute(0, 2, 1).flatten(0, 1)


def validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing) -> tuple[int, int, int]:
    """QUANT-ERRORS: x floating [M, K]; int32 qweight, qzeros of the packing's shapes; scales [K / g, N]
    of x's dtype; g a positive int dividing K. Returns (K, N, g)."""
    require_floating(x, "x")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {tuple(x.shape)}")
    require_choice(packing, "packing", PACKINGS)
    group_size = require_int(group_size, "group_size", minimum=1)
    for t, name in ((qweight, "qweight"), (qzeros, "qzeros")):
        require_tensor(t, name)
        if t.dtype != torch.int32 or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D int32 tensor, got {t.dtype} {tuple(t.shape)}")
    k = x.shape[1]
    n = qweight.shape[1] * 8 if packing == "awq" else qweight.shape[1]
    want = (k, n // 8) if packing == "awq" else (k // 8, n)
    if tuple(qweight.shape) != want or k % 8:
        raise ValueError(
            f"qweight must have shape {want} for K = {k} ({packing}), got {tuple(qweight.shape)}"
        )
    if k % group_size:
        raise ValueError(f"group_size ({group_size}) must divide K ({k})")
    require_floating(scales, "scales")
    if tuple(scales.shape) != (k // group_size, n) or scales.dtype != x.dtype:
        raise ValueError(f"scales must be [{k // group_size}, {n}] in x's dtype, got {scales.dtype} "
                         f"{tuple(scales.shape)}")  # fmt: skip
    if tuple(qzeros.shape) != (k // group_size, n // 8):
        raise ValueError(f"qzeros must have shape {(k // group_size, n // 8)}, got {tuple(qzeros.shape)}")
    return k, n, group_size


def w4a16_weight(qweight, scales, qzeros, *, group_size: int, packing: str) -> torch.Tensor:
    """QUANT-W4A16-PACKING, -ZEROS, -GROUPS: the dequantized weight [K, N] in float64."""
    awq = packing == "awq"
    q = unpack_nibbles(qweight, dim=1 if awq else 0, awq_order=awq)
    zeros = unpack_nibbles(qzeros, dim=1, awq_order=awq) + (1 if packing == "gptq" else 0)
    rows = lambda t: t.to(torch.float64).repeat_interleave(group_size, dim=0)  # noqa: E731
    return (q.to(torch.float64) - rows(zeros)) * rows(scales)


def w4a16_mm(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    qzeros: torch.Tensor,
    *,
    group_size: int,
    packing: str,
) -> torch.Tensor:
    """QUANT-W4A16-MM: x @ w, w the dequantized int4 weight [K, N] (layouts in the module docstring)."""
    _, _, group_size = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
    w = w4a16_weight(qweight.cpu(), scales.cpu(), qzeros.cpu(), group_size=group_size, packing=packing)
    return x.detach().to(torch.float64) @ w.to(x.device)

"""Oracles for the quantized linear-layer contracts (clauses QUANT-*).

Each oracle computes in float64 from the exact values it is given and returns float64 on the
input's device. A quantizer's oracle returns ``(q, scale)``: ``scale`` the float64 value the clause
defines, ``q`` the exact quotient ``x / scale`` rounded to the target grid (int8: half to even;
fp8: the format's nearest value), saturated. The GEMM oracles dequantize (integer or fp8 values
times their scales, exact in float64 below 2^53 for int8; fp8's products carry one float64
rounding, relative to the terms' magnitude, which ``gemm_magnitude`` gives) and sum in float64.
The self-tests (tests/test_reference_quant.py) compare them with a brute force written from the
spec text and with PyTorch's ``_int_mm`` and ``_scaled_mm``.
"""

from __future__ import annotations

import math
import numbers

import torch

from reference.quant_w4a16 import w4a16_mm
from reference.validation import require_floating, require_int, require_tensor

__all__ = [
    "FP8_DTYPES",
    "INT8_MAX",
    "dequantized_operands",
    "dynamic_int8_quant",
    "fp8_block_scaled_mm",
    "fp8_fn_to_fnuz",
    "fp8_group_quant",
    "fp8_max_values",
    "fp8_quant",
    "fp8_round",
    "gemm_magnitude",
    "int8_scaled_mm",
    "round_half_even",
    "ue8m0",
    "w4a16_mm",
]

INT8_MAX = 127  # QUANT-INT8-SCALE: symmetric, scale = amax / 127
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# QUANT-FP8-TENSOR: the divisor a dynamic scale may use: the format's largest finite value, and for
# e4m3fnuz also 224 (vLLM's ROCm kernels; QUANT-FP8-TENSOR's sources).
_FNUZ_VLLM_MAX = 224.0
OUT_DTYPES = (torch.bfloat16, torch.float16)  # QUANT-W8A8-DTYPE, QUANT-FP8-BLOCK-MM
GROUP_SIZES = (32, 64, 128)  # QUANT-FP8-GROUP


def fp8_max_values(fp8_dtype: torch.dtype) -> tuple[float, ...]:
    """QUANT-FP8-TENSOR: the largest magnitudes a conforming quantizer may map amax to."""
    top = float(torch.finfo(fp8_dtype).max)
    return (top, _FNUZ_VLLM_MAX) if fp8_dtype == torch.float8_e4m3fnuz else (top,)


def round_half_even(t: torch.Tensor) -> torch.Tensor:
    """QUANT-INT8-TIES: the nearest integer, ties to even (torch.round's rule)."""
    return torch.round(t)


def fp8_round(t: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """QUANT-FP8-TENSOR: ``t`` saturated to the format's range, then the nearest value of its grid
    (ties to even), as float64. Written from the grid: 3 mantissa bits, the smallest normal's
    exponent from ``torch.finfo`` (subnormal spacing ``smallest_normal / 8``)."""
    top = float(torch.finfo(fp8_dtype).max)
    t = t.to(torch.float64).clamp(-top, top)
    tiny = float(torch.finfo(fp8_dtype).smallest_normal)
    exponent = torch.floor(torch.log2(t.abs().clamp_min(tiny)))
    spacing = torch.exp2(exponent - 3)
    return torch.round(t / spacing) * spacing


def ue8m0(scale: torch.Tensor) -> torch.Tensor:
    """QUANT-FP8-UE8M0: the power of two at or above ``scale`` (2^ceil(log2 scale))."""
    return torch.exp2(torch.ceil(torch.log2(scale.to(torch.float64))))


def _x64(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to(torch.float64)


def validate_activation(x, name: str = "x") -> torch.Tensor:
    """QUANT-ERRORS: a floating tensor of rank >= 2 with a non-empty last dim."""
    require_floating(x, name)
    if x.dim() < 2 or x.shape[-1] == 0:
        raise ValueError(f"{name} must have rank >= 2 and a non-empty last dim, got shape {tuple(x.shape)}")
    return x


def _require_fp8_dtype(fp8_dtype) -> torch.dtype:
    if fp8_dtype not in FP8_DTYPES:
        raise ValueError(f"fp8_dtype must be one of {FP8_DTYPES}, got {fp8_dtype!r}")
    return fp8_dtype


def _require_out_dtype(out_dtype) -> torch.dtype:
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {OUT_DTYPES}, got {out_dtype!r}")
    return out_dtype


def dynamic_int8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """QUANT-INT8-SCALE, -ROUND, -TIES, -ZERO-ROW: per-row (token) symmetric int8 quantization of
    x [..., K]: scale = amax(|x|) / 127 ([..., 1]); q = round_half_even(x / scale), 0 on a zero row."""
    validate_activation(x)
    x = _x64(x)
    amax = x.abs().amax(-1, keepdim=True)
    scale = amax / INT8_MAX
    q = round_half_even(x * INT8_MAX / torch.where(amax > 0, amax, 1.0))
    return q.clamp(-INT8_MAX, INT8_MAX), scale


def _require_int8_matrix(t, name: str) -> torch.Tensor:
    require_tensor(t, name)
    if t.dtype != torch.int8 or t.dim() != 2 or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 2-D int8 tensor, got {t.dtype} {tuple(t.shape)}")
    return t


def _require_scale(scale, name: str, sizes: tuple[int, ...]) -> torch.Tensor:
    """A float32 scale of numel 1 (per tensor) or ``sizes[-1]`` (per row / channel), any shape
    that flattens to it ([M, 1], [1, N], [N])."""
    require_tensor(scale, name)
    if scale.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {scale.dtype}")
    if scale.numel() not in sizes:
        raise ValueError(f"{name} must have numel in {sorted(set(sizes))}, got shape {tuple(scale.shape)}")
    return scale


def validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype) -> tuple[int, int, int]:
    """QUANT-ERRORS: a [M, K] and b [K, N] int8, scales float32 per tensor or per row / column,
    bias [N] in out_dtype or None, out_dtype bfloat16 or float16. Returns (M, K, N)."""
    _require_int8_matrix(a, "a")
    _require_int8_matrix(b, "b")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"b must have shape [K, N] with K = a.shape[1] = {a.shape[1]}, got {tuple(b.shape)}")
    m, k = a.shape
    n = b.shape[1]
    _require_scale(scale_a, "scale_a", (1, m))
    _require_scale(scale_b, "scale_b", (1, n))
    _require_out_dtype(out_dtype)
    _require_bias(bias, n, out_dtype)
    return m, k, n


def _require_bias(bias, n: int, out_dtype: torch.dtype) -> None:
    if bias is None:
        return
    require_floating(bias, "bias")
    if tuple(bias.shape) != (n,):
        raise ValueError(f"bias must have shape ({n},), got {tuple(bias.shape)}")
    if bias.dtype != out_dtype:
        raise TypeError(f"bias must have out_dtype {out_dtype}, got {bias.dtype}")


def _per(scale: torch.Tensor, size: int, *, rows: bool) -> torch.Tensor:
    """A scale of numel 1 or ``size`` as a float64 column ([size, 1]) or row ([1, size])."""
    flat = _x64(scale).reshape(-1).expand(size) if scale.numel() == 1 else _x64(scale).reshape(-1)
    return flat[:, None] if rows else flat[None, :]


def int8_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    *,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """QUANT-W8A8-MM, -EXACT, -SCALES, -BIAS: (a @ b, exact integers) * scale_a[m] * scale_b[n] + bias[n].
    The integer sum is exact in float64 (|a @ b| <= 127^2 K < 2^53)."""
    m, k, n = validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
    acc = _x64(a) @ _x64(b)
    out = acc * _per(scale_a, m, rows=True) * _per(scale_b, n, rows=False)
    return out if bias is None else out + _x64(bias)


def dequantized_operands(a, b, scale_a, scale_b, *, block_size=None) -> tuple[torch.Tensor, torch.Tensor]:
    """QUANT-TOL: a GEMM's operands times their scales in float64, as [M, K] and [K, N] (b given as
    [K, N] for int8, as [N, K] with ``block_size`` for the block-scaled fp8 GEMM)."""
    if block_size is None:
        return _x64(a) * _per(scale_a, a.shape[0], rows=True), _x64(b) * _per(scale_b, b.shape[1], rows=False)
    a_deq, b_deq = _block_dequant(a, b, scale_a, scale_b, block_size)
    return a_deq, b_deq.T


def gemm_magnitude(a, b, scale_a, scale_b, *, block_size=None) -> torch.Tensor:
    """QUANT-TOL: M[m, n] = sum_k |a_deq[m, k]| |b_deq[k, n]|, the magnitude an accumulation's
    rounding is relative to."""
    a_deq, b_deq = dequantized_operands(a, b, scale_a, scale_b, block_size=block_size)
    return a_deq.abs() @ b_deq.abs()


def fp8_quant(
    x: torch.Tensor, *, fp8_dtype: torch.dtype, scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """QUANT-FP8-TENSOR, QUANT-FP8-SATURATE: per-tensor fp8. ``scale`` None: dynamic, amax(|x|) / max
    of the format (the first of ``fp8_max_values``); else the given float32 scalar. q =
    fp8_round(x / scale), saturated. Returns (q, scale [1])."""
    validate_activation(x)
    validate_fp8_scale(fp8_dtype, scale)
    if scale is not None:
        s = _x64(scale).reshape(1)
    else:
        s = _x64(x).abs().amax().reshape(1) / fp8_max_values(fp8_dtype)[0]
    if not bool(s > 0):
        raise ValueError(f"scale must be > 0, got {s.item()} (a dynamic scale of an all-zero x)")
    return fp8_round(_x64(x) / s, fp8_dtype), s


def validate_fp8_scale(fp8_dtype, scale) -> None:
    """QUANT-ERRORS: an e4m3 format, and a float32 scale of numel 1 or None (dynamic)."""
    _require_fp8_dtype(fp8_dtype)
    if scale is not None:
        _require_scale(scale, "scale", (1,))


def validate_group_args(x, group_size, fp8_dtype, use_ue8m0) -> int:
    validate_activation(x)
    group_size = require_int(group_size, "group_size", minimum=1)
    if x.shape[-1] % group_size:
        raise ValueError(f"x.shape[-1] ({x.shape[-1]}) must be a multiple of group_size ({group_size})")
    _require_fp8_dtype(fp8_dtype)
    if not isinstance(use_ue8m0, bool):
        raise ValueError(f"use_ue8m0 must be a bool, got {use_ue8m0!r}")
    return group_size


def fp8_group_quant(
    x: torch.Tensor, *, group_size: int, fp8_dtype: torch.dtype, use_ue8m0: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """QUANT-FP8-GROUP, QUANT-FP8-UE8M0: x [..., K] in groups of ``group_size`` consecutive
    elements of a row: scale = amax(|group|) / max (ue8m0: the power of two at or above it) and
    q = fp8_round(x / scale). Returns (q [..., K], scales [..., K / group_size]). A zero group's
    scale is any positive value (vLLM's eps floor): the oracle uses 1 there, whose q is 0."""
    group_size = validate_group_args(x, group_size, fp8_dtype, use_ue8m0)
    groups = _x64(x).unflatten(-1, (-1, group_size))
    amax = groups.abs().amax(-1)
    scale = amax / fp8_max_values(fp8_dtype)[0]
    if use_ue8m0:
        scale = torch.where(amax > 0, ue8m0(scale.clamp_min(1e-300)), scale)
    scale = torch.where(amax > 0, scale, 1.0)
    q = fp8_round(groups / scale[..., None], fp8_dtype)
    return q.flatten(-2), scale


def _block_counts(rows: int, cols: int, block_size) -> tuple[int, int]:
    return math.ceil(rows / block_size[0]), math.ceil(cols / block_size[1])


def validate_block_mm(a, b, a_scales, b_scales, block_size, out_dtype) -> tuple[int, int]:
    """QUANT-ERRORS: a [M, K] and b [N, K] of one fp8 dtype, a_scales [M, ceil(K / bk)],
    b_scales [ceil(N / bn), ceil(K / bk)] float32, block_size (bn, bk) positive ints."""
    for t, name in ((a, "a"), (b, "b")):
        require_tensor(t, name)
        if t.dtype not in FP8_DTYPES or t.dim() != 2 or t.numel() == 0:
            raise ValueError(f"{name} must be a non-empty 2-D fp8 tensor, got {t.dtype} {tuple(t.shape)}")
    if b.dtype != a.dtype or b.shape[1] != a.shape[1]:
        raise ValueError(
            f"b must be [N, K] with a's K {a.shape[1]} and dtype {a.dtype}, got {b.dtype} {tuple(b.shape)}"
        )
    if (
        not isinstance(block_size, list | tuple)
        or len(block_size) != 2
        or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in block_size)
    ):
        raise ValueError(f"block_size must be two positive ints [bn, bk], got {block_size!r}")
    bn, bk = (int(v) for v in block_size)
    kb = math.ceil(a.shape[1] / bk)
    for t, name, shape in (
        (a_scales, "a_scales", (a.shape[0], kb)),
        (b_scales, "b_scales", (math.ceil(b.shape[0] / bn), kb)),
    ):
        require_tensor(t, name)
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {t.dtype}")
        if tuple(t.shape) != shape:
            raise ValueError(
                f"{name} must have shape {shape} (ceil of the block counts), got {tuple(t.shape)}"
            )
    _require_out_dtype(out_dtype)
    return bn, bk


def _block_dequant(a, b, a_scales, b_scales, block_size):
    """a * a_scales[m, k // bk] and b * b_scales[n // bn, k // bk], in float64."""
    bn, bk = (int(v) for v in block_size)
    k, n = a.shape[1], b.shape[0]
    a_deq = _x64(a) * _x64(a_scales).repeat_interleave(bk, dim=1)[:, :k]
    b_full = _x64(b_scales).repeat_interleave(bn, dim=0)[:n].repeat_interleave(bk, dim=1)[:, :k]
    return a_deq, _x64(b) * b_full


def fp8_block_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    *,
    block_size: tuple[int, int],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """QUANT-FP8-BLOCK-MM, -PARTIAL: out[m, n] = sum_k a[m, k] a_scales[m, k // bk] *
    b[n, k] b_scales[n // bn, k // bk]: per-token-group activations times block weights, trailing
    blocks partial (the scale of element (n, k) is always that of block (n // bn, k // bk))."""
    validate_block_mm(a, b, a_scales, b_scales, block_size, out_dtype)
    a_deq, b_deq = _block_dequant(a, b, a_scales, b_scales, block_size)
    return a_deq @ b_deq.T


def validate_fnuz_args(weight, weight_scale, input_scale) -> None:
    require_tensor(weight, "weight")
    if weight.dtype != torch.float8_e4m3fn:
        raise ValueError(f"weight must be float8_e4m3fn, got {weight.dtype}")
    for t, name in ((weight_scale, "weight_scale"), (input_scale, "input_scale")):
        if t is None and name == "input_scale":
            continue
        require_tensor(t, name)
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {t.dtype}")


def fp8_fn_to_fnuz(
    weight: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """QUANT-FNUZ-CONVERT: the e4m3fnuz weight whose values times the returned scales equal the
    e4m3fn weight's times the given ones: the same bits read as e4m3fnuz are worth half (its
    exponent bias is 8, not 7), so the values are halved and the scales doubled (0x80, e4m3fn's -0
    and e4m3fnuz's NaN, becomes 0). Returns (weight values, weight_scale, input_scale) in float64."""
    validate_fnuz_args(weight, weight_scale, input_scale)
    doubled = None if input_scale is None else _x64(input_scale) * 2
    return _x64(weight) / 2, _x64(weight_scale) * 2, doubled

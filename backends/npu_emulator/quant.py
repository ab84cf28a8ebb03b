"""Emulated int8 quant ops of torch_npu (spec/ascend.md, CANN-DYNAMIC-QUANT, CANN-QUANT-MATMUL):
``npu_dynamic_quant`` and ``npu_quant_matmul``.

Both keep their documented input rules, which the adapter has to meet: ``npu_dynamic_quant`` takes
float16 / bfloat16 x of rank > 1 and returns (int8 y, float32 scale of x.shape[:-1]);
``npu_quant_matmul`` takes int8 x1 [m, k] and x2 [k, n], a 1-D scale (t = 1 or n), an optional 1-D
float32 pertoken_scale (m), and the bias / output dtype combinations of its table. Rounding ties to
even and a zero row quantizing to 0 are emulator choices (the documentation says ``round`` and is
silent on zero rows); int8 output, offset and the int64 scale of npu_trans_quant_param are not
emulated (NotImplementedError).
"""

from __future__ import annotations

import torch

__all__ = ["npu_dynamic_quant", "npu_quant_matmul"]

X_DTYPES = (torch.float16, torch.bfloat16)
# CANN-QUANT-MATMUL: output dtype -> the bias dtypes its table allows (int8 x1 / x2, float32 scale).
BIAS_DTYPES = {
    torch.bfloat16: (torch.int32, torch.bfloat16, torch.float32),
    torch.float16: (torch.int32, torch.float16, torch.float32),
}


def npu_dynamic_quant(x: torch.Tensor, *, smooth_scales=None, group_index=None, dst_type=None):
    """(y, scale): per-token symmetric int8, scale = row_max(|x * smooth|) / 127, y = round(x / scale)."""
    if x.dtype not in X_DTYPES:
        raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"x must have more than one dimension, got shape {tuple(x.shape)}")
    if group_index is not None or dst_type not in (None, torch.int8):
        raise NotImplementedError("the emulator covers int8 output without group_index")
    h = x.float()
    if smooth_scales is not None:
        if smooth_scales.dtype != x.dtype or tuple(smooth_scales.shape) != (x.shape[-1],):
            raise ValueError("smooth_scales must be 1-D of x's last dim and x's dtype")
        h = h * smooth_scales.float()
    scale = h.abs().amax(-1) / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # emulator choice: a zero row -> 0
    y = torch.round(h / safe[..., None]).clamp(-128, 127).to(torch.int8)
    return y, scale


def _require_1d(t, name: str, sizes: tuple[int, ...], dtypes: tuple) -> None:
    if t.dim() != 1 or t.shape[0] not in sizes:
        raise ValueError(f"{name} must be 1-D of size in {sorted(set(sizes))}, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have a dtype in {dtypes}, got {t.dtype}")


def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
    """(x1 @ x2, exact int32) * scale[n] * pertoken_scale[m] (+ bias[n]), in output_dtype: an int32 bias
    joins the integer sum, a floating one is added after the dequantization."""
    if x1.dtype != torch.int8 or x2.dtype != torch.int8:
        raise TypeError(f"x1 and x2 must be int8, got {x1.dtype}, {x2.dtype}")
    if x1.dim() != 2 or x2.dim() != 2 or x1.shape[1] != x2.shape[0]:
        raise ValueError(f"x1 [m, k] and x2 [k, n] expected, got {tuple(x1.shape)}, {tuple(x2.shape)}")
    if output_dtype not in BIAS_DTYPES or offset is not None:
        raise NotImplementedError("the emulator covers float16 / bfloat16 output without offset")
    (m, _), n = x1.shape, x2.shape[1]
    scale_dtypes = (torch.float32, torch.bfloat16) if output_dtype == torch.bfloat16 else (torch.float32,)
    _require_1d(scale, "scale", (1, n), scale_dtypes)
    if pertoken_scale is not None:
        _require_1d(pertoken_scale, "pertoken_scale", (m,), (torch.float32,))
    elif output_dtype == torch.float16 and bias is not None and bias.dtype != torch.int32:
        raise TypeError("a float16 output without pertoken_scale takes an int32 bias or none")
    if bias is not None:
        _require_1d(bias, "bias", (n,), BIAS_DTYPES[output_dtype])
    acc = x1.double() @ x2.double()  # exact: |sum| < 2^31 < 2^53
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.double()
    out = acc.float() * scale.float()
    if pertoken_scale is not None:
        out = out * pertoken_scale.float()[:, None]
    if bias is not None and bias.dtype != torch.int32:
        out = out + bias.float()
    return out.to(output_dtype)

"""The Ascend adapter's int8 quant ops (spec/quant.md through spec/ascend.md, CANN-DYNAMIC-QUANT,
CANN-QUANT-MATMUL): W8A8 with dynamic per-token activations, as vllm-ascend serves it.

``dynamic_int8_quant`` calls ``npu_dynamic_quant`` (float16 / bfloat16 x; another dtype goes through
the native op, which the Ascend op cannot take) and adds the scale's trailing dim.
``int8_scaled_mm`` calls ``npu_quant_matmul`` with the weight scale as ``scale`` (1 or n) and the
activation scale as ``pertoken_scale`` (a per-tensor one expanded to m), the bias in the output dtype
(the op's table allows it with a pertoken_scale). Operands are made contiguous (inferred: the op
takes ND tensors; a transposed int8 weight is copied). The fp8 ops have no Ascend mapping here.
"""

from __future__ import annotations

import torch

from backends import NotImplementedOp, native_quant
from reference import quant as _quant

__all__ = ["install"]

_NO_FP8 = "the Ascend adapter maps the W8A8 int8 ops only (spec/ascend.md, CANN-QUANT-MATMUL)"


def dynamic_int8_quant(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _quant.validate_activation(x)
    if x.dtype not in (torch.float16, torch.bfloat16):
        return native_quant.dynamic_int8_quant(x)
    y, scale = self.ops.npu_dynamic_quant(x.contiguous())
    return y, scale.unsqueeze(-1)


def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
    m, _, n = _quant.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
    pertoken = scale_a.reshape(-1).expand(m).contiguous()
    return self.ops.npu_quant_matmul(
        a.contiguous(),
        b.contiguous(),
        scale_b.reshape(-1).contiguous(),
        pertoken_scale=pertoken,
        bias=bias,
        output_dtype=out_dtype,
    )


def install(cls) -> None:
    """The quant ops as methods of the adapter class ``cls``; the fp8 ones not implemented, with why."""
    for op in (dynamic_int8_quant, int8_scaled_mm):
        setattr(cls, op.__name__, op)
    for op in ("fp8_quant", "fp8_group_quant", "fp8_block_scaled_mm", "fp8_fn_to_fnuz", "w4a16_mm"):
        setattr(cls, op, NotImplementedOp(_NO_FP8))

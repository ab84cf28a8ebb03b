"""msprobe's torch_npu W8A8 API calls -> the quant contract ops (spec/ascend.md, MSPROBE-MAP,
CANN-DYNAMIC-QUANT, CANN-QUANT-MATMUL); ``msprobe_map.MAPPINGS`` holds them.

``npu_dynamic_quant`` is ``dynamic_int8_quant`` in its plain form (no smooth_scales or
group_index, int8 output), its scale of ``x.shape[:-1]`` given the contract's trailing dim as the
adapter (backends/npu_quant.py) does. ``npu_quant_matmul`` is ``int8_scaled_mm`` in the dynamic
W8A8 form: int8 2-D operands, a float32 per-token ``pertoken_scale`` as scale_a, a float32 ``scale``
of 1 or n as scale_b, a bias in the output dtype or none, float16 / bfloat16 output (recorded as
the option ``out_dtype`` by its name). Every other form raises ``Unmapped`` with the reason.
"""

from __future__ import annotations

import torch

from opconform.capture.msprobe_binding import REQUIRED, Mapped, Mapping, Unmapped, tensor_arg

OUT_DTYPES = (torch.bfloat16, torch.float16)  # QUANT-W8A8-DTYPE's out_dtype


def _npu_dynamic_quant(bound: dict, outputs: list) -> Mapped:
    api = "npu_dynamic_quant"
    x = tensor_arg(bound, "x", api)
    if bound["smooth_scales"] is not None:
        raise Unmapped(f"{api}: smooth_scales multiplies x before the amax (SmoothQuant); "
                       "dynamic_int8_quant has no such input")  # fmt: skip
    if bound["group_index"] is not None:
        raise Unmapped(f"{api}: group_index quantizes per MoE expert group; dynamic_int8_quant per token")
    if bound["dst_type"] not in (None, torch.int8):
        raise Unmapped(f"{api}: dst_type {bound['dst_type']} (int4 output); dynamic_int8_quant's q is int8")
    if len(outputs) != 2 or not all(isinstance(t, torch.Tensor) for t in outputs):
        raise Unmapped(f"{api}: {len(outputs)} outputs recorded, the op returns (y, scale)")
    y, scale = outputs
    return Mapped("dynamic_int8_quant", {"x": x}, {}, [y, scale.unsqueeze(-1)])  # scale [..., 1]


def _npu_quant_matmul(bound: dict, outputs: list) -> Mapped:
    api = "npu_quant_matmul"
    x1, x2, scale = (tensor_arg(bound, n, api) for n in ("x1", "x2", "scale"))
    pertoken, bias, out_dtype = bound["pertoken_scale"], bound["bias"], bound["output_dtype"]
    if x1.dtype != torch.int8 or x2.dtype != torch.int8 or x1.dim() != 2 or x2.dim() != 2:
        raise Unmapped(f"{api}: x1 {x1.dtype} {x1.dim()}-d, x2 {x2.dtype} {x2.dim()}-d; int8_scaled_mm takes "
                       "2-d int8 operands (int32 packs int4, more dims are batches)")  # fmt: skip
    offset = "given" if bound["offset"] is not None else None
    if offset or out_dtype not in OUT_DTYPES:
        raise Unmapped(f"{api}: output_dtype {out_dtype}, offset {offset}: int8_scaled_mm dequantizes to "
                       "bfloat16 / float16 (no int8 output, no offset)")  # fmt: skip
    if not isinstance(pertoken, torch.Tensor):
        raise Unmapped(f"{api}: no pertoken_scale (a static per-tensor activation scale folded into scale); "
                       "mapped is the dynamic per-token form, pertoken_scale as scale_a")  # fmt: skip
    if scale.dtype != torch.float32 or pertoken.dtype != torch.float32:
        raise Unmapped(f"{api}: scale {scale.dtype}, pertoken_scale {pertoken.dtype}: int8_scaled_mm's "
                       "scales are float32 (int64: npu_trans_quant_param's packed form)")  # fmt: skip
    inputs = {"a": x1, "b": x2, "scale_a": pertoken, "scale_b": scale}
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype or bias.dim() != 1:
            raise Unmapped(f"{api}: bias {getattr(bias, 'dtype', bias)} for {out_dtype} output: "
                           "int8_scaled_mm takes a 1-d bias in out_dtype, added after the scales (an int32 "
                           "bias joins the integer sum, CANN-QUANT-MATMUL)")  # fmt: skip
        inputs["bias"] = bias
    out_name = str(out_dtype).removeprefix("torch.")
    return Mapped("int8_scaled_mm", inputs, {"out_dtype": out_name}, outputs[:1])


_QUANT, _MATMUL = "spec/ascend.md, CANN-DYNAMIC-QUANT", "spec/ascend.md, CANN-QUANT-MATMUL"
QUANT_MAPPINGS = {
    "NPU.npu_dynamic_quant": Mapping(
        (("x", REQUIRED), ("smooth_scales", None), ("group_index", None), ("dst_type", None)),
        _npu_dynamic_quant,
        _QUANT,
    ),
    "NPU.npu_quant_matmul": Mapping(
        (
            ("x1", REQUIRED),
            ("x2", REQUIRED),
            ("scale", REQUIRED),
            ("offset", None),
            ("pertoken_scale", None),
            ("bias", None),
            ("output_dtype", None),
        ),
        _npu_quant_matmul,
        _MATMUL,
    ),
}

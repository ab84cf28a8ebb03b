"""MSPROBE-MAP of the W8A8 APIs without msprobe (tests/test_msprobe_map.py's style): the emulator's
``npu_dynamic_quant`` and ``npu_quant_matmul`` outputs are judged conforming through the mapping, the
output of a neighbouring form (smooth_scales applied, pertoken_scale dropped, another output dtype)
is not, and every form the contract ops do not cover is outside with its reason."""

from __future__ import annotations

import pytest
import torch

from backends import npu_emulator as npu
from conformance.errors import ConformanceError
from opconform.capture.judge import compare
from opconform.capture.msprobe_map import Unmapped, map_call
from opconform.capture.ops import REPLAY_OPS

QUANT, MATMUL = "NPU.npu_dynamic_quant", "NPU.npu_quant_matmul"


def _judge(api: str, args: list, kwargs: dict, outputs) -> str:
    """The mapped op, after its row passes the outputs (ConformanceError when it does not)."""
    mapped = map_call(api, args, kwargs, list(outputs) if isinstance(outputs, (tuple, list)) else [outputs])
    compare(REPLAY_OPS[mapped.op], mapped.inputs, mapped.options, mapped.outputs, context=api)
    return mapped.op


def _x(g, dtype=torch.bfloat16):
    x = (torch.randn(2, 3, 64, generator=g) * 3).to(dtype)
    x[1, 0] = 0  # QUANT-INT8-ZERO-ROW: the emulator's choice, y 0 and scale 0
    return x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_npu_dynamic_quant_is_dynamic_int8_quant_and_smoothing_is_another_form(dtype):
    g = torch.Generator().manual_seed(0)
    x = _x(g, dtype)
    assert _judge(QUANT, [x], {}, npu.npu_dynamic_quant(x)) == "dynamic_int8_quant"
    assert _judge(QUANT, [x], {"dst_type": torch.int8}, npu.npu_dynamic_quant(x)) == "dynamic_int8_quant"
    smooth = (torch.rand(64, generator=g) + 0.5).to(dtype)
    with pytest.raises(ConformanceError) as caught:  # the smoothed output is no plain quantization of x
        _judge(QUANT, [x], {}, npu.npu_dynamic_quant(x, smooth_scales=smooth))
    assert caught.value.clause == "QUANT-INT8-SCALE"


def _mm(g, m=4, k=96, n=6):
    x1 = torch.randint(-127, 128, (m, k), generator=g, dtype=torch.int8)
    x2 = torch.randint(-127, 128, (k, n), generator=g, dtype=torch.int8)
    scale = torch.rand(n, generator=g) * 0.01 + 1e-3
    pertoken = torch.rand(m, generator=g) * 0.01 + 1e-3
    return x1, x2, scale, pertoken


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [False, True])
def test_npu_quant_matmul_is_int8_scaled_mm_with_pertoken_as_scale_a(out_dtype, bias):
    g = torch.Generator().manual_seed(1)
    x1, x2, scale, pertoken = _mm(g)
    kwargs = {"pertoken_scale": pertoken, "output_dtype": out_dtype}
    if bias:
        kwargs["bias"] = torch.randn(6, generator=g).to(out_dtype)
    out = npu.npu_quant_matmul(x1, x2, scale, **kwargs)
    assert _judge(MATMUL, [x1, x2, scale], kwargs, out) == "int8_scaled_mm"
    one = scale[:1].clone()  # a per-tensor weight scale, t = 1
    assert _judge(MATMUL, [x1, x2, one], kwargs, npu.npu_quant_matmul(x1, x2, one, **kwargs))
    if out_dtype == torch.bfloat16:  # the table allows bfloat16 output without pertoken_scale
        dropped = npu.npu_quant_matmul(x1, x2, scale, **{**kwargs, "pertoken_scale": None})
        with pytest.raises(ConformanceError) as caught:
            _judge(MATMUL, [x1, x2, scale], kwargs, dropped)
        assert caught.value.clause == "QUANT-W8A8-MM"
    other = torch.float16 if out_dtype == torch.bfloat16 else torch.bfloat16
    with pytest.raises(ConformanceError) as caught:
        _judge(MATMUL, [x1, x2, scale], kwargs, out.to(other))
    assert caught.value.clause == "QUANT-W8A8-DTYPE"


def _outside():
    g = torch.Generator().manual_seed(2)
    x = _x(g)
    x1, x2, scale, pertoken = _mm(g)
    mm = {"pertoken_scale": pertoken, "output_dtype": torch.bfloat16}
    return {
        "smooth_scales": (QUANT, [x], {"smooth_scales": torch.ones(64, dtype=x.dtype)}, "smooth_scales"),
        "group_index": (QUANT, [x], {"group_index": torch.tensor([3, 6])}, "group_index"),
        "int4 output": (QUANT, [x], {"dst_type": torch.quint4x2}, "dst_type"),
        "no pertoken_scale": (MATMUL, [x1, x2, scale], {"output_dtype": torch.bfloat16}, "no pertoken_scale"),
        "int8 output": (MATMUL, [x1, x2, scale], {**mm, "output_dtype": None}, "output_dtype None"),
        "offset": (MATMUL, [x1, x2, scale], {**mm, "offset": torch.ones(6)}, "offset given"),
        "int64 scale": (MATMUL, [x1, x2, scale.to(torch.int64)], mm, "scale torch.int64"),
        "int32 bias": (
            MATMUL,
            [x1, x2, scale],
            {**mm, "bias": torch.ones(6, dtype=torch.int32)},
            "integer sum",
        ),
        "float32 bias": (MATMUL, [x1, x2, scale], {**mm, "bias": torch.ones(6)}, "bias torch.float32"),
        "int32 operands": (MATMUL, [x1.int(), x2, scale], mm, "x1 torch.int32"),
    }


@pytest.mark.parametrize("form", sorted(_outside()))
def test_the_forms_the_contract_ops_do_not_cover_are_outside_with_the_reason(form):
    api, args, kwargs, says = _outside()[form]
    outputs = [torch.zeros(1), torch.zeros(1)]  # never read: the arguments are refused first
    with pytest.raises(Unmapped, match=says):
        map_call(api, args, kwargs, outputs)

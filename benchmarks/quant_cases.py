"""The quant bench cases (spec/quant.md) at DeepSeek-V3 and Qwen3 shapes.

Shapes and where they come from (published configs):

- DeepSeek-V3: hidden 7168, dense MLP intermediate 18432, fp8 e4m3fn weights with
  ``weight_block_size = [128, 128]`` and 1 x 128 activation groups; a prefill chunk of 2048 tokens
  through the MLP's up projection (K = 7168 -> N = 18432 would need 132M fp8 weights and a 1 GiB
  float64 oracle: ASSUMPTION, one tensor-parallel shard of 8, N = 2304).
- Qwen3-32B served W8A8 (dynamic per-token int8 activations, per-channel int8 weights, as the Ascend
  ports serve it): hidden 5120, intermediate 25600; ASSUMPTION: one shard of 8 (N = 3200), 1024
  tokens.

The activations are drawn in the bench's dtype (the GEMMs' out_dtype: float16 or bfloat16; another
dtype runs in bfloat16), the quantized operands from them with the oracles' formulas.
"""

from __future__ import annotations

import math

import torch

from benchmarks.case_types import Case

__all__ = ["QUANT_CASES"]


def _out(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.float16, torch.bfloat16) else torch.bfloat16


def _activation(p, device, dtype):
    x = torch.randn(p["tokens"], p["hidden"], device=device).to(_out(dtype))
    if p.get("group_size"):
        return (x,), {"group_size": p["group_size"], "fp8_dtype": torch.float8_e4m3fn, "use_ue8m0": False}
    return (x,), {}


def _int8_mm(p, device, dtype):
    gen = torch.Generator().manual_seed(0)
    m, k, n = p["tokens"], p["hidden"], p["inter"]
    a = torch.randint(-127, 128, (m, k), generator=gen, dtype=torch.int8)
    b = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8).T  # the [N, K] weight's view
    scale_a, scale_b = torch.rand(m, 1, generator=gen) * 1e-3, torch.rand(1, n, generator=gen) * 1e-3
    args = tuple(t.to(device) for t in (a, b, scale_a, scale_b))
    return args, {"bias": None, "out_dtype": _out(dtype)}


def _block_mm(p, device, dtype):
    gen = torch.Generator().manual_seed(0)
    m, k, n = p["tokens"], p["hidden"], p["inter"]
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    a_s = torch.rand(m, math.ceil(k / 128), generator=gen) * 1e-2
    b_s = torch.rand(math.ceil(n / 128), math.ceil(k / 128), generator=gen) * 1e-2
    args = tuple(t.to(device) for t in (a, b, a_s, b_s))
    return args, {"block_size": (128, 128), "out_dtype": _out(dtype)}


_DSV3 = {"tokens": 2048, "hidden": 7168, "inter": 2304, "group_size": 128}
_QWEN3 = {"tokens": 1024, "hidden": 5120, "inter": 3200}
_QUICK = {"tokens": 8, "hidden": 256, "inter": 130}

QUANT_CASES: tuple[Case, ...] = (
    Case(
        "fp8_group_quant/deepseek-v3-prefill",
        "fp8_group_quant",
        "quant",
        "DeepSeek-V3 activations, 1 x 128 fp8 e4m3fn groups: hidden 7168, a prefill chunk of 2048 tokens",
        _DSV3,
        _activation,
        quick_params={**_QUICK, "group_size": 128},
    ),
    Case(
        "fp8_block_scaled_mm/deepseek-v3-up",
        "fp8_block_scaled_mm",
        "quant",
        "DeepSeek-V3 up projection, 128 x 128 fp8 blocks: 2048 tokens, K 7168, N 2304 (a shard of 8)",
        _DSV3,
        _block_mm,
        quick_params=_QUICK,
    ),
    Case(
        "dynamic_int8_quant/qwen3-w8a8",
        "dynamic_int8_quant",
        "quant",
        "Qwen3-32B W8A8 per-token int8 activations: hidden 5120, 1024 tokens",
        _QWEN3,
        _activation,
        quick_params=_QUICK,
    ),
    Case(
        "int8_scaled_mm/qwen3-w8a8-up",
        "int8_scaled_mm",
        "quant",
        "Qwen3-32B W8A8 up projection: 1024 tokens, K 5120, N 3200 (a shard of 8), per-token x per-channel",
        _QWEN3,
        _int8_mm,
        quick_params=_QUICK,
    ),
)

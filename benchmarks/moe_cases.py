"""The MoE bench cases (spec/moe.md) and the float64 matmul floor of the expert computation.

Shapes and where they come from (transformers 5.24 configs):

- DeepSeek-V3 routing: 256 routed experts, 8 per token, 8 groups of which 4 are kept, the sum of
  each group's top two, sigmoid scores, a float32 correction bias, renormalised, rsf 2.5
  (``DeepseekV3Config``); 16k tokens of a prefill batch, float32 router logits (transformers
  computes them in float32).
- Qwen3-MoE expert layer: hidden 2048, expert intermediate 768, 8 experts per token
  (``Qwen3MoeConfig`` for Qwen3-30B-A3B: 128 experts); ASSUMPTION: one expert-parallel shard of 16
  experts, so the weights fit a CPU bench machine; 1024 tokens routed among them.

``floor_ratio(params)`` times the float64 oracle of fused_moe against the float64 matmuls of the
same routed rows alone (the two GEMMs per expert, nothing else), in the same process
(``python -m benchmarks.moe_cases``).
"""

from __future__ import annotations

import time

import torch

from benchmarks.case_types import Case

__all__ = ["MOE_CASES", "floor_ratio"]


def _routing(p, device, dtype):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(p["tokens"], p["experts"], generator=gen).to(device=device, dtype=dtype)
    bias = (7.0 + 0.02 * torch.randn(p["experts"], generator=gen)).to(device)  # float32, DeepSeek-V3-like
    kwargs = dict(top_k=8, scoring="sigmoid", renormalize=True, correction_bias=bias, num_groups=8,
                  topk_group=4, group_score="top2_sum", routed_scaling_factor=2.5)  # fmt: skip
    return (logits,), kwargs


def _fused(p, device, dtype):
    gen = torch.Generator().manual_seed(0)
    tokens, hidden, inter, experts, k = p["tokens"], p["hidden"], p["inter"], p["experts"], p["top_k"]
    x = torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=dtype)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5).to(
        device=device, dtype=dtype
    )
    w2 = (torch.randn(experts, hidden, inter, generator=gen) / inter**0.5).to(device=device, dtype=dtype)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)]).to(device)
    weights = torch.rand(tokens, k, generator=gen).to(device)
    kwargs = dict(
        activation="silu", limit=p.get("limit"), apply_router_weight_on_input=False, output_scale=1.0
    )
    return (x, w13, w2, weights, ids), kwargs


_DSV3 = {"tokens": 16384, "experts": 256}
_QWEN3 = {"tokens": 1024, "hidden": 2048, "inter": 768, "experts": 16, "top_k": 8}

MOE_CASES: tuple[Case, ...] = (
    Case("select_experts/deepseek-v3-16k", "select_experts", "moe",
         "DeepSeek-V3 routing: 16k tokens x 256 experts, 8 groups keep 4 (top-2 sum), top-8, sigmoid, "
         "float32 bias, renormalised, rsf 2.5", _DSV3, _routing, quick_params={**_DSV3, "tokens": 64}),
    Case("fused_moe/qwen3-moe-shard", "fused_moe", "moe",
         "Qwen3-MoE expert layer (hidden 2048, intermediate 768, top-8) on a 16-expert shard, 1024 tokens",
         _QWEN3, _fused,
         quick_params={**_QWEN3, "tokens": 16, "hidden": 32, "inter": 16, "experts": 4, "top_k": 2}),
)  # fmt: skip


def floor_ratio(params: dict = _QWEN3) -> tuple[float, float, float]:
    """(oracle seconds, float64 matmul floor seconds, ratio) for fused_moe at ``params``, one run each."""
    from reference.moe import fused_moe

    args, kwargs = _fused(params, torch.device("cpu"), torch.bfloat16)
    x, w13, w2, _, ids = args
    start = time.perf_counter()
    fused_moe(*args, **kwargs)
    oracle = time.perf_counter() - start
    x64 = x.double()
    start = time.perf_counter()
    for expert in torch.unique(ids).tolist():
        rows = x64[torch.nonzero(ids == expert, as_tuple=True)[0]]
        h = rows @ w13[expert].double().T
        _ = h[:, : params["inter"]] @ w2[expert].double().T
    floor = time.perf_counter() - start
    return oracle, floor, oracle / floor


if __name__ == "__main__":
    oracle_s, floor_s, ratio = floor_ratio()
    print(f"fused_moe oracle {oracle_s:.2f} s, float64 matmul floor {floor_s:.2f} s, ratio {ratio:.2f}")

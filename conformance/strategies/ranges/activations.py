"""The activations family's range rules (spec/activations.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, config_forms, has, odd, past

GATED = ("gelu_and_mul", "silu_and_mul", "swiglu_step_and_mul", "silu_clamped_and_mul", "swiglu_oai_and_mul",
         "situ_and_mul")  # fmt: skip
CLAMPED = ("swiglu_step_and_mul", "silu_clamped_and_mul", "swiglu_oai_and_mul")


def _half(arguments: dict):
    x = arguments.get("x")
    return int(x.shape[-1]) // 2 if getattr(x, "dim", lambda: 0)() else None


def _limit_edges(arguments: dict):
    """Which of limit - 1 ulp, limit and limit + 1 ulp (in x's dtype) the up half holds, as -1, 0, 1."""
    import torch

    x, limit = arguments.get("x"), arguments.get("limit")
    if limit is None or not getattr(x, "is_floating_point", lambda: False)():
        return None
    interleaved = arguments.get("interleaved")
    up = (x[..., 1::2] if interleaved else x[..., x.shape[-1] // 2 :]).detach().cpu().double().abs()
    t = torch.tensor(float(limit), dtype=x.dtype)
    edges = {-1: torch.nextafter(t, torch.tensor(0.0, dtype=x.dtype)), 0: t,
             1: torch.nextafter(t, torch.tensor(float("inf"), dtype=x.dtype))}  # fmt: skip
    return [k for k, v in edges.items() if bool((up == float(v)).any())]


def _limit_config_form(arguments: dict):
    """Rule 5: a list the selection does not read (the other list given), or the read list missing."""
    config, shared = arguments.get("config"), arguments.get("shared")
    if not isinstance(config, dict) or not isinstance(shared, bool):
        return None
    read = "swiglu_limits_shared" if shared else "swiglu_limits"
    other = "swiglu_limits" if shared else "swiglu_limits_shared"
    forms = ["the other list given"] if config.get(other) is not None else []
    return forms + (["the read list missing"] if read not in config else [])


HALF = {op: Measure(op, "intermediate size", _half) for op in GATED}
EDGES = {op: Measure(op, "up at limit - 1 ulp, limit, + 1 ulp", _limit_edges) for op in CLAMPED}
LIMIT_CONFIG = Measure("swiglu_limit", "config form", _limit_config_form)
RULES = [
    *(past(HALF[op], 1024, "vLLM's act_and_mul kernels: one block of 1024 threads a row") for op in GATED),
    odd(HALF["silu_and_mul"]),
    has(HALF["silu_and_mul"], 768, 1408, why="Qwen3-MoE's and DeepSeek-V2-Lite's expert sizes"),
    has(HALF["gelu_and_mul"], 768, 1408, why="Qwen3-MoE's and DeepSeek-V2-Lite's expert sizes"),
    *(has(EDGES[op], -1, 0, 1, kind=2, why="the clamp limit at T - 1, T and T + 1") for op in CLAMPED),
    config_forms(
        LIMIT_CONFIG,
        "the other list given",
        "the read list missing",
        why="ACT-LIMIT-CONFIG: shared selects swiglu_limits_shared, else swiglu_limits",
    ),  # fmt: skip
]

"""The MoE family's range rules (spec/moe.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, below, config_forms, dim, has, odd, past


def _value(name: str):
    return lambda arguments: arguments.get(name)


def _kth_gap_in_ulps(dtype_name: str):
    """The smallest nonzero gap, over the rows, between the k-th and (k+1)-th allowed selection scores, in
    ulps of ``dtype_name`` at the k-th score; measured for float32 logits without a bias only."""

    def of(arguments: dict):
        import torch

        from conformance.strategies.moe import spacing
        from reference import moe as oracle

        logits, k = arguments.get("router_logits"), arguments.get("top_k")
        if arguments.get("correction_bias") is not None or getattr(logits, "dtype", None) != torch.float32:
            return None
        if not bool(torch.isfinite(logits).all()):
            return None  # a padded row (MOE-PADDED)
        _, sel = oracle.selection_scores(logits, scoring=arguments["scoring"], correction_bias=None)
        groups = {key: arguments[key] for key in ("num_groups", "topk_group", "group_score")}
        allowed = oracle.allowed_experts(sel, **groups)
        if k >= int(allowed[0].sum()):
            return None
        ranked = sel.masked_fill(~allowed, float("-inf")).sort(dim=-1, descending=True).values
        ulps = (ranked[:, k - 1] - ranked[:, k]) / spacing(ranked[:, k - 1], getattr(torch, dtype_name))
        ulps = ulps[ulps > 0]  # an exact tie is MOE-TIES' other draw, not a near one
        return round(float(ulps.min()), 3) if ulps.numel() else None

    return of


def _router_config_form(arguments: dict):
    """Rule 5: DeepSeek-V2's group keys without group_limited_greedy, and that switch with its keys."""
    config = arguments.get("config")
    if not isinstance(config, dict) or config.get("model_type") != "deepseek_v2":
        return None
    grouped = config.get("topk_method") == "group_limited_greedy"
    keys = "n_group" in config or "topk_group" in config
    if keys and not grouped:
        return "group keys without group_limited_greedy"
    return "group_limited_greedy with its keys" if grouped and keys else None


EXPERTS = Measure("select_experts", "experts", dim("router_logits", 1))
TOP_K = Measure("select_experts", "top_k", _value("top_k"))
GROUPS = Measure("select_experts", "num_groups", _value("num_groups"))
GAP_BF16 = Measure("select_experts", "k-th gap in bfloat16 ulps (float32 logits, no bias)",
                   _kth_gap_in_ulps("bfloat16"))  # fmt: skip
GAP_F16 = Measure("select_experts", "k-th gap in float16 ulps (float32 logits, no bias)",
                  _kth_gap_in_ulps("float16"))  # fmt: skip
FUSED_TOKENS = Measure("fused_moe", "tokens", dim("x", 0))
HIDDEN = Measure("fused_moe", "hidden", dim("x", 1))
INTERMEDIATE = Measure("fused_moe", "intermediate", dim("w2", 2))
FUSED_EXPERTS = Measure("fused_moe", "experts", dim("w13", 0))
SLOTS = Measure("fused_moe", "top_k", dim("topk_ids", 1))
SHARED_SLOTS = Measure("append_shared_experts", "routed slots", dim("topk_ids", 1))

RULES = [
    past(EXPERTS, 512, "the top-k gating softmax kernels specialise expert counts up to 512"),
    odd(EXPERTS),
    has(EXPERTS, 288, 384, why="Step-3.5's 288 and Kimi-K2's 384 experts"),
    past(TOP_K, 8, "DeepSeek-V3's top-8; Qwen3-Next routes 10"),
    past(GROUPS, 4, "DeepSeek-V3's 8 groups"),
    below(GAP_BF16, 1.0, "MOE-TIES: float32 logits are chosen on float32 scores or better"),
    below(GAP_F16, 1.0, "MOE-TIES: float32 logits are chosen on float32 scores or better"),
    past(FUSED_TOKENS, 64, "vLLM's fused_moe Triton kernel: BLOCK_SIZE_M 16 to 64"),
    odd(FUSED_TOKENS),
    past(HIDDEN, 128, "vLLM's fused_moe Triton kernel: BLOCK_SIZE_N and _K to 128"),
    odd(HIDDEN),
    has(INTERMEDIATE, 768, 1408, why="Qwen3-MoE's and DeepSeek-V2-Lite's expert intermediate sizes"),
    past(FUSED_EXPERTS, 64, "moe_align_block_size's paths by expert count"),
    past(SLOTS, 2, "more than two slots a token"),
    has(SHARED_SLOTS, 8, why="DeepSeek-V3's 8 routed slots before its shared one"),
    config_forms(
        Measure("moe_router_config", "config form", _router_config_form),
        "group keys without group_limited_greedy",
        "group_limited_greedy with its keys",
        why="MOE-CONFIG: DeepSeek-V2's topk_method switches its groups on",
    ),  # fmt: skip
]

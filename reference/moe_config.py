"""MOE-CONFIG: the routing a transformers config asks for (MOE-CONFIG).

``moe_router_config(config)`` takes a transformers config object or a plain dict with its
``model_type`` and returns select_experts' keywords (without the bias tensor), whether the
model has a correction bias, and the factor on the MoE output. A key the config lacks takes the
default of transformers' own config class (``DEFAULTS``, transformers 5.24, checked against the
installed classes by tests/test_reference_moe.py).
"""

from __future__ import annotations

from reference.validation import require_choice

__all__ = ["DEFAULTS", "MODEL_TYPES", "moe_router_config"]

# model_type -> the defaults of the fields read (transformers 5.24 configuration classes).
DEFAULTS: dict[str, dict] = {
    "deepseek_v3": {"num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "norm_topk_prob": True,
                    "routed_scaling_factor": 2.5},
    "deepseek_v2": {"num_experts_per_tok": None, "n_group": None, "topk_group": None, "topk_method": "greedy",
                    "routed_scaling_factor": 1.0},
    "qwen3_moe": {"num_experts_per_tok": 8, "norm_topk_prob": False},
    "mixtral": {"num_experts_per_tok": 2},
    "gpt_oss": {"num_experts_per_tok": 4},
    "step3p5": {"num_experts_per_tok": 8, "moe_router_scaling_factor": 1.0},
}  # fmt: skip
MODEL_TYPES = tuple(DEFAULTS)


def _field(config, model_type: str, name: str):
    default = DEFAULTS[model_type][name]
    value = config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)
    return default if value is None and default is not None else value


def _result(top_k, scoring, renormalize, *, groups=1, kept=1, group_score="max", rsf=1.0, bias=False,
            output_scale=1.0) -> dict:  # fmt: skip
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"config's num_experts_per_tok must be an int >= 1, got {top_k!r}")
    return {
        "top_k": top_k, "scoring": scoring, "renormalize": bool(renormalize), "num_groups": int(groups),
        "topk_group": int(kept), "group_score": group_score, "routed_scaling_factor": float(rsf),
        "uses_correction_bias": bias, "output_scale": float(output_scale),
    }  # fmt: skip


def moe_router_config(config) -> dict:
    """MOE-CONFIG: the select_experts keywords (top_k, scoring, renormalize, num_groups, topk_group,
    group_score, routed_scaling_factor), ``uses_correction_bias`` and ``output_scale`` of a config.

    - deepseek_v3: sigmoid, correction bias, n_group groups scored by the sum of their top two,
      topk_group kept, renormalised as norm_topk_prob says, routed_scaling_factor in the weights;
    - deepseek_v2: softmax, topk_method "greedy" (no groups) or "group_limited_greedy" (groups by
      their max), never renormalised, routed_scaling_factor in the weights;
    - qwen3_moe: softmax, renormalised as norm_topk_prob says; mixtral: softmax, renormalised;
    - gpt_oss: top-k on the logits, then softmax over the k (topk_softmax);
    - step3p5 (Step-3.5/3.7): sigmoid, correction bias, renormalised, moe_router_scaling_factor on
      the MoE output (output_scale), not in the weights.
    """
    model_type = config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)
    require_choice(model_type, "config.model_type", MODEL_TYPES)

    def field(name):
        return _field(config, model_type, name)

    top_k = field("num_experts_per_tok")
    if model_type == "deepseek_v3":
        return _result(top_k, "sigmoid", field("norm_topk_prob"), groups=field("n_group"),
                       kept=field("topk_group"), group_score="top2_sum", rsf=field("routed_scaling_factor"),
                       bias=True)  # fmt: skip
    if model_type == "deepseek_v2":
        grouped = field("topk_method") == "group_limited_greedy"
        groups, kept = (field("n_group"), field("topk_group")) if grouped else (1, 1)
        if groups is None or kept is None:
            raise ValueError(
                "config.n_group and config.topk_group must be set for topk_method 'group_limited_greedy'"
            )
        return _result(top_k, "softmax", False, groups=groups, kept=kept, rsf=field("routed_scaling_factor"))
    if model_type == "qwen3_moe":
        return _result(top_k, "softmax", field("norm_topk_prob"))
    if model_type == "mixtral":
        return _result(top_k, "softmax", True)
    if model_type == "gpt_oss":
        return _result(top_k, "topk_softmax", False)
    return _result(top_k, "sigmoid", True, bias=True, output_scale=field("moe_router_scaling_factor"))

"""MOE-ERRORS: the MoE ops' bad inputs as ``ErrorCase`` records (spec/moe.md, MOE-ERRORS), shared
by the oracles' self-tests and the conformance property."""

from __future__ import annotations

import torch

from conformance.bad_input import ErrorCase, names

ROUTING = dict(
    top_k=2,
    scoring="sigmoid",
    renormalize=True,
    correction_bias=None,
    num_groups=1,
    topk_group=1,
    group_score="max",
    routed_scaling_factor=1.0,
)


def _routing(logits=(3, 8), dtype=torch.float32, bias=None, **options):
    def build(d):
        kw = {**ROUTING, **options}
        if bias is not None:
            kw["correction_bias"] = torch.zeros(bias, device=d)
        return (torch.zeros(logits, dtype=dtype, device=d),), kw

    return build


def _select(name, argument, exception=ValueError, **call) -> ErrorCase:
    return ErrorCase("MOE-ERRORS", "select_experts", name, _routing(**call), exception, names(argument))


FUSED = dict(activation="silu", limit=None, apply_router_weight_on_input=False, output_scale=1.0)


def _fused(x=(3, 8), w13=(4, 12, 8), w2=(4, 8, 6), ids=None, ids_dtype=torch.int64, **options):
    def build(d):
        topk = torch.tensor([[0, 1]] * x[0] if ids is None else ids, dtype=ids_dtype, device=d)
        tensors = (
            torch.zeros(x, device=d),
            torch.zeros(w13, device=d),
            torch.zeros(w2, device=d),
            torch.ones(topk.shape, device=d),
            topk,
        )
        return tensors, {**FUSED, **options}

    return build


def _fused_case(name, argument, exception=ValueError, **call) -> ErrorCase:
    return ErrorCase("MOE-ERRORS", "fused_moe", name, _fused(**call), exception, names(argument))


def _shared(name, argument, exception=ValueError, shared_ids=(8,), rsf_on_output=False, rsf=2.5):
    def build(d):
        kw = dict(shared_ids=shared_ids, rsf_on_output=rsf_on_output, routed_scaling_factor=rsf)
        return (torch.ones(3, 2, device=d), torch.zeros(3, 2, dtype=torch.int64, device=d)), kw

    return ErrorCase("MOE-ERRORS", "append_shared_experts", name, build, exception, names(argument))


def _config(name, config) -> ErrorCase:
    return ErrorCase(
        "MOE-ERRORS", "moe_router_config", name, lambda d: ((config,), {}), ValueError, names("config")
    )


ERRORS = [
    _select("logits-1d", "router_logits", logits=(8,)),
    _select("logits-integer", "router_logits", dtype=torch.int64),
    _select("top-k-zero", "top_k", top_k=0),
    _select("top-k-over-experts", "top_k", top_k=9),
    _select("scoring-unknown", "scoring", scoring="softmax_sigmoid"),
    _select("renormalize-int", "renormalize", TypeError, renormalize=1),
    _select("bias-wrong-length", "correction_bias", bias=(7,)),
    _select("groups-not-dividing", "num_groups", num_groups=3),
    _select("topk-group-over-groups", "topk_group", num_groups=2, topk_group=3),
    _select("top-k-over-kept-experts", "top_k", top_k=5, num_groups=4, topk_group=2),
    _select("group-score-unknown", "group_score", group_score="mean"),
    _select("rsf-zero", "routed_scaling_factor", routed_scaling_factor=0.0),
    _select("rsf-nan", "routed_scaling_factor", routed_scaling_factor=float("nan")),
    _select("topk-softmax-with-groups", "scoring", scoring="topk_softmax", num_groups=2),
    _fused_case("w13-hidden-mismatch", "w13", w13=(4, 12, 7)),
    _fused_case("w2-shape", "w2", w2=(4, 8, 5)),
    _fused_case("ids-out-of-range", "topk_ids", ids=[[0, 4]] * 3),
    _fused_case("ids-float", "topk_ids", ids_dtype=torch.float32),
    _fused_case("activation-unknown", "activation", activation="gelu"),
    _fused_case("limit-negative", "limit", limit=-1.0),
    _fused_case(
        "on-input-not-bool", "apply_router_weight_on_input", TypeError, apply_router_weight_on_input=0
    ),
    _fused_case("output-scale-inf", "output_scale", output_scale=float("inf")),
    _shared("shared-ids-empty", "shared_ids", shared_ids=()),
    _shared("shared-ids-negative", "shared_ids", shared_ids=(-1,)),
    _shared("rsf-on-output-not-bool", "rsf_on_output", TypeError, rsf_on_output="yes"),
    _shared("rsf-negative", "routed_scaling_factor", rsf=-2.5),
    _config("model-type-unknown", {"model_type": "llama"}),
    _config(
        "grouped-without-n-group",
        {
            "model_type": "deepseek_v2",
            "num_experts_per_tok": 6,
            "topk_method": "group_limited_greedy",
            "topk_group": 3,
        },
    ),
]

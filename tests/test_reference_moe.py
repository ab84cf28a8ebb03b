"""Self-test of the MoE oracles (spec/moe.md): a per-token brute force written from the clause text,
and transformers' routers and expert modules as peers (DeepSeek-V2/V3, Qwen3-MoE, Mixtral,
gpt-oss, Step-3.5), each configured through moe_router_config."""

from __future__ import annotations

import inspect
import math
import random

import pytest
import torch

from reference import moe as oracle
from reference.moe_config import DEFAULTS, moe_router_config


def _brute_select(row, top_k, scoring, renormalize, bias, groups, kept, group_score, rsf):
    """MOE-SELECT from the text, one token in plain Python: {id: weight}."""
    n = len(row)
    if scoring == "softmax":
        top = max(row)
        exps = [math.exp(v - top) for v in row]
        scores = [e / sum(exps) for e in exps]
    elif scoring == "sigmoid":
        scores = [1 / (1 + math.exp(-v)) for v in row]
    else:
        scores = list(row)
    sel = [s + (bias[i] if bias is not None else 0.0) for i, s in enumerate(scores)]
    size = n // groups
    group_value = []
    for g in range(groups):
        members = sorted(sel[g * size : (g + 1) * size], reverse=True)
        group_value.append(members[0] if group_score == "max" or groups == 1 else members[0] + members[1])
    best_groups = sorted(range(groups), key=lambda g: -group_value[g])[:kept]
    candidates = [i for i in range(n) if i // size in best_groups]
    chosen = sorted(candidates, key=lambda i: -sel[i])[:top_k]
    if scoring == "topk_softmax":
        exps = [math.exp(row[i] - max(row[c] for c in chosen)) for i in chosen]
        weights = [e / sum(exps) for e in exps]
    else:
        weights = [scores[i] for i in chosen]
        if renormalize:
            weights = [w / sum(weights) for w in weights]
    return {i: w * rsf for i, w in zip(chosen, weights, strict=True)}


def _by_id(weights, ids, row):
    return {int(i): float(w) for i, w in zip(ids[row], weights[row], strict=True)}


SETTINGS = [
    # scoring, groups, kept, group_score, bias, renormalize, rsf, experts, top_k
    ("softmax", 1, 1, "max", False, False, 1.0, 8, 2),
    ("softmax", 1, 1, "max", False, True, 2.5, 16, 4),
    ("sigmoid", 4, 2, "top2_sum", True, True, 2.5, 16, 4),
    ("sigmoid", 4, 2, "top2_sum", True, False, 2.826, 16, 3),
    ("softmax", 4, 1, "max", False, False, 16.0, 16, 2),
    ("sigmoid", 8, 3, "max", True, True, 1.0, 32, 6),
    ("topk_softmax", 1, 1, "max", False, False, 1.5, 12, 4),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(map(str, s)))
def test_oracle_matches_brute_force(setting):
    """Random rows, with negative biases inside the chosen groups: the oracle's selection and weights
    are the brute force's."""
    scoring, groups, kept, group_score, with_bias, renorm, rsf, experts, top_k = setting
    rng = random.Random(hash(setting) % 1000)
    logits = torch.tensor([[rng.gauss(0, 2) for _ in range(experts)] for _ in range(12)], dtype=torch.float64)
    bias = (
        torch.tensor([rng.uniform(-1.5, 0.5) for _ in range(experts)], dtype=torch.float64)
        if with_bias
        else None
    )
    kw = dict(top_k=top_k, scoring=scoring, renormalize=renorm, correction_bias=bias, num_groups=groups,
              topk_group=kept, group_score=group_score, routed_scaling_factor=rsf)  # fmt: skip
    weights, ids = oracle.select_experts(logits, **kw)
    for t in range(logits.shape[0]):
        b = None if bias is None else bias.tolist()
        want = _brute_select(logits[t].tolist(), top_k, scoring, renorm, b, groups, kept, group_score, rsf)
        got = _by_id(weights, ids, t)
        assert got.keys() == want.keys(), (t, got, want)
        assert all(math.isclose(got[i], want[i], rel_tol=1e-12) for i in got)


def test_masked_groups_are_minus_inf_not_zero():
    """MOE-GROUPS: with negative selection scores inside the kept group, an expert of an excluded
    group (selection -0.1, above the kept ones but outside their group) is never chosen."""
    logits = torch.zeros(1, 4, dtype=torch.float64)
    bias = torch.tensor([-2.0, -3.0, -0.6, -2.5], dtype=torch.float64)  # selection = 0.5 + bias
    _, ids = oracle.select_experts(logits, top_k=2, scoring="sigmoid", renormalize=False,
                                   correction_bias=bias, num_groups=2, topk_group=1, group_score="max",
                                   routed_scaling_factor=1.0)  # fmt: skip
    assert set(ids[0].tolist()) == {2, 3}


def test_fused_moe_matches_brute_force():
    """MOE-FUSED: the blocked oracle equals the per-token, per-slot sum written from the text, for
    every activation, with and without limit, weight on the output or the input, and output_scale."""
    gen = torch.Generator().manual_seed(3)
    x, w13, w2 = (
        torch.randn(4, 6, generator=gen),
        torch.randn(5, 8, 6, generator=gen),
        torch.randn(5, 6, 4, generator=gen),
    )
    weights, ids = (
        torch.rand(4, 3, generator=gen),
        torch.stack([torch.randperm(5, generator=gen)[:3] for _ in range(4)]),
    )
    for activation in oracle.ACTIVATIONS:
        for limit in (None, 1.5):
            for on_input in (False, True):
                got = oracle.fused_moe(x, w13, w2, weights, ids, activation=activation, limit=limit,
                                       apply_router_weight_on_input=on_input, output_scale=2.5)  # fmt: skip
                for t in range(4):
                    want = torch.zeros(6, dtype=torch.float64)
                    for j in range(3):
                        e, w = int(ids[t, j]), float(weights[t, j])
                        v = x[t].double() * (w if on_input else 1.0)
                        h = w13[e].double() @ v
                        if activation == "silu":  # the gate clamped before the SiLU
                            g, u = h[:4], h[4:]
                            if limit is not None:
                                g, u = g.clamp(max=limit), u.clamp(-limit, limit)
                            a = g * torch.sigmoid(g) * u
                        elif activation == "swiglustep":  # the SiLU clamped
                            g, u = h[:4], h[4:]
                            g = g * torch.sigmoid(g)
                            a = (g if limit is None else g.clamp(max=limit)) * (
                                u if limit is None else u.clamp(-limit, limit)
                            )
                        else:
                            g, u = h[::2], h[1::2]
                            if limit is not None:
                                g, u = g.clamp(max=limit), u.clamp(-limit, limit)
                            a = g * torch.sigmoid(1.702 * g) * (u + 1)
                        want += (w2[e].double() @ a) * (1.0 if on_input else w)
                    torch.testing.assert_close(got[t], want * 2.5, rtol=1e-12, atol=1e-12)


def test_fused_moe_blocks_agree(monkeypatch):
    """The blocking is invisible: blocks of 3 tokens give the single-block result."""
    gen = torch.Generator().manual_seed(5)
    ids = torch.stack([torch.randperm(3, generator=gen)[:2] for _ in range(10)])
    args = (torch.randn(10, 4, generator=gen), torch.randn(3, 6, 4, generator=gen),
            torch.randn(3, 4, 3, generator=gen), torch.rand(10, 2, generator=gen), ids)  # fmt: skip
    kw = dict(activation="silu", limit=2.0, apply_router_weight_on_input=False, output_scale=1.0)
    whole = oracle.fused_moe(*args, **kw)
    monkeypatch.setattr(oracle, "BLOCK_TOKENS", 3)
    torch.testing.assert_close(oracle.fused_moe(*args, **kw), whole, rtol=1e-13, atol=1e-13)


def test_shared_experts_slot():
    """MOE-SHARED: the shared slot is appended with weight 1, or 1/rsf when rsf is on the output."""
    w, i = torch.rand(2, 3), torch.tensor([[0, 1, 2], [3, 4, 5]])
    for on_output, expected in ((False, 1.0), (True, 0.4)):
        sw, si = oracle.append_shared_experts(
            w, i, shared_ids=(6,), rsf_on_output=on_output, routed_scaling_factor=2.5
        )
        assert si.tolist() == [[0, 1, 2, 6], [3, 4, 5, 6]] and torch.allclose(
            sw[:, 3], torch.full((2,), expected, dtype=torch.float64)
        )
        assert torch.equal(sw[:, :3], w.double())


# --- transformers' routers and experts as peers ------------------------------------------------

transformers = pytest.importorskip("transformers")


def _peer_router(model_type: str):
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as v2
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as v3
    from transformers.models.gpt_oss import modeling_gpt_oss as oss
    from transformers.models.mixtral import modeling_mixtral as mix
    from transformers.models.qwen3_moe import modeling_qwen3_moe as qwen
    from transformers.models.step3p7 import modeling_step3p7 as step

    common = dict(hidden_size=8, num_experts_per_tok=4, num_attention_heads=2, num_key_value_heads=2)
    groups = dict(n_routed_experts=16, n_group=4, topk_group=2)
    v2_groups = dict(topk_method="group_limited_greedy", routed_scaling_factor=16.0)
    table = {
        "deepseek_v3": (transformers.DeepseekV3Config, groups, v3.DeepseekV3TopkRouter),
        "deepseek_v3-norenorm": (transformers.DeepseekV3Config, {**groups, "norm_topk_prob": False},
                                 v3.DeepseekV3TopkRouter),
        "deepseek_v2": (transformers.DeepseekV2Config, {**groups, **v2_groups}, v2.DeepseekV2TopkRouter),
        "qwen3_moe": (transformers.Qwen3MoeConfig, {"num_experts": 16}, qwen.Qwen3MoeTopKRouter),
        "qwen3_moe-renorm": (transformers.Qwen3MoeConfig, {"num_experts": 16, "norm_topk_prob": True},
                             qwen.Qwen3MoeTopKRouter),
        "mixtral": (transformers.MixtralConfig, {"num_local_experts": 16}, mix.MixtralTopKRouter),
        "gpt_oss": (transformers.GptOssConfig, {"num_local_experts": 16}, oss.GptOssTopKRouter),
        "step3p5": (step.Step3p7TextConfig, {"n_routed_experts": 16, "moe_router_scaling_factor": 3.0},
                    step.Step3p7TopKRouter),
    }  # fmt: skip
    config_class, fields, cls = table[model_type]
    config = config_class(**fields, **common)
    return config, cls(config)


ROUTERS = ["deepseek_v3", "deepseek_v3-norenorm", "deepseek_v2", "qwen3_moe", "qwen3_moe-renorm", "mixtral",
           "gpt_oss", "step3p5"]  # fmt: skip


@pytest.mark.parametrize("model_type", ROUTERS)
def test_oracle_matches_transformers_routers(model_type):
    """MOE-SELECT, MOE-CONFIG: the router's ids and weights (by id) are the oracle's on its logits,
    with the keywords moe_router_config reads from the router's own config."""
    config, router = _peer_router(model_type)
    gen = torch.Generator().manual_seed(len(model_type))
    with torch.no_grad():
        router.weight.copy_(torch.randn(router.weight.shape, generator=gen))
        if hasattr(router, "bias"):
            router.bias.copy_(torch.randn(router.bias.shape, generator=gen))
        bias = getattr(router, "e_score_correction_bias", None)
        if bias is not None:
            bias.copy_(torch.rand(bias.shape, generator=gen) * 0.5 - 0.4)
        logits, weights, ids = router(torch.randn(32, 8, generator=gen))
    kw = moe_router_config(config)
    assert kw.pop("uses_correction_bias") == (bias is not None)
    output_scale = kw.pop("output_scale")
    assert output_scale == (3.0 if model_type == "step3p5" else 1.0)
    want_w, want_i = oracle.select_experts(logits, correction_bias=bias, **kw)
    for t in range(32):
        got, want = _by_id(weights, ids, t), _by_id(want_w, want_i, t)
        assert got.keys() == want.keys(), (t, got, want)
        assert all(math.isclose(got[i], want[i], rel_tol=2e-6, abs_tol=1e-7) for i in got), (got, want)


def test_config_defaults_are_transformers():
    """MOE-CONFIG: the DEFAULTS table is the installed config classes' defaults, and a dict with only
    model_type reads them (deepseek_v3: groups 8 of 4 kept, rsf 2.5, renormalised)."""
    from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig

    classes = {"deepseek_v3": transformers.DeepseekV3Config, "deepseek_v2": transformers.DeepseekV2Config,
               "qwen3_moe": transformers.Qwen3MoeConfig, "mixtral": transformers.MixtralConfig,
               "gpt_oss": transformers.GptOssConfig, "step3p5": Step3p7TextConfig}  # fmt: skip
    for model_type, fields in DEFAULTS.items():
        instance = classes[model_type]()
        assert instance.model_type == model_type
        assert {k: getattr(instance, k) for k in fields} == fields, model_type
    v3 = moe_router_config({"model_type": "deepseek_v3"})
    assert (v3["num_groups"], v3["topk_group"], v3["routed_scaling_factor"], v3["renormalize"]) == (
        8,
        4,
        2.5,
        True,
    )


def test_fused_moe_matches_transformers_experts():
    """MOE-FUSED, MOE-CLAMP: DeepseekV3Experts (SwiGLU), Step3p7Experts (clamped, limit 0.5) and
    GptOssExperts (zero biases) in float64 on the same weights and routing."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Experts
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    from transformers.models.step3p7.modeling_step3p7 import Step3p7Experts

    gen = torch.Generator().manual_seed(11)
    x = torch.randn(9, 8, generator=gen, dtype=torch.float64)
    weights = torch.rand(9, 2, generator=gen, dtype=torch.float64)
    ids = torch.stack([torch.randperm(6, generator=gen)[:2] for _ in range(9)])
    ds = transformers.DeepseekV3Config(
        n_routed_experts=6,
        hidden_size=8,
        moe_intermediate_size=5,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    oss = transformers.GptOssConfig(
        num_local_experts=6, hidden_size=8, intermediate_size=5, num_attention_heads=2, num_key_value_heads=2
    )
    from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig

    step_config = Step3p7TextConfig(n_routed_experts=6, hidden_size=8, moe_intermediate_size=5,
                                    num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    if "layer_idx" in inspect.signature(Step3p7Experts.__init__).parameters:  # transformers >= 5.25
        step_config.swiglu_limits = [0.5]
        clamped = Step3p7Experts(step_config, 0)
    else:  # 5.24: the limit is an argument
        clamped = Step3p7Experts(step_config, swiglu_limit=0.5)
    cases = [
        (DeepseekV3Experts(ds), "silu", None),
        (clamped, "swiglustep", 0.5),
        (GptOssExperts(oss), "swiglu_oai", 7.0),
    ]
    for module, activation, limit in cases:
        module = module.double()
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
            if isinstance(module, GptOssExperts):
                module.gate_up_proj_bias.zero_()
                module.down_proj_bias.zero_()
                w13, w2 = module.gate_up_proj.transpose(1, 2), module.down_proj.transpose(1, 2)
            else:
                w13, w2 = module.gate_up_proj, module.down_proj
            got = module(x, ids, weights)
        want = oracle.fused_moe(x, w13, w2, weights, ids, activation=activation, limit=limit,
                                apply_router_weight_on_input=False, output_scale=1.0)  # fmt: skip
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)

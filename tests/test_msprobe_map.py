"""MSPROBE-MAP without msprobe: each mapping's argument semantics checked against the API itself
(torch's own sdpa and gelu, the emulator's torch_npu ops): the API's output on random inputs is
judged conforming through the mapping, and the output of a neighbouring form (the mask ignored,
the halves not swapped) is not, so the mapping is the API's semantics and not a looser one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends import npu_emulator as npu
from conformance.errors import ConformanceError
from opconform.capture.judge import compare
from opconform.capture.msprobe_map import Unmapped, map_call
from opconform.capture.ops import REPLAY_OPS


def _judge(api: str, args: list, kwargs: dict, outputs) -> None:
    mapped = map_call(api, args, kwargs, list(outputs) if isinstance(outputs, (tuple, list)) else [outputs])
    compare(REPLAY_OPS[mapped.op], mapped.inputs, mapped.options, mapped.outputs, context=api)


def _qkv(g, heads=4, kv_heads=2, length=5):
    q = torch.randn(2, heads, length, 8, generator=g)
    return (
        q,
        torch.randn(2, kv_heads, length, 8, generator=g),
        torch.randn(2, kv_heads, length, 8, generator=g),
    )


SDPA_FORMS = {
    "bool mask": lambda g, L: {"attn_mask": torch.rand(L, L, generator=g) > 0.4},
    "0/-inf float mask": lambda g, L: {
        "attn_mask": torch.zeros(L, L).masked_fill(torch.rand(L, L, generator=g) > 0.5, float("-inf"))
    },
    "is_causal": lambda g, L: {"is_causal": True},
    "explicit scale": lambda g, L: {"scale": 0.2},
}


@pytest.mark.parametrize("form", sorted(SDPA_FORMS))
def test_sdpa_maps_to_attention_as_torch_computes_it(form):
    g = torch.Generator().manual_seed(0)
    q, k, v = _qkv(g)
    extra = SDPA_FORMS[form](g, q.shape[-2])
    extra["attn_mask"] = extra.get("attn_mask", torch.ones(5, 5, dtype=torch.bool)).clone()
    extra["attn_mask"][:, 0] = True if extra["attn_mask"].dtype == torch.bool else 0.0  # no empty row
    if form == "is_causal":
        del extra["attn_mask"]
    got = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **extra)
    _judge("Functional.scaled_dot_product_attention", [q, k, v], {"enable_gqa": True, **extra}, got)
    plain = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # the mask / causality / scale dropped
    if form != "bool mask" or not extra["attn_mask"].all():
        with pytest.raises(ConformanceError) as caught:
            _judge("Functional.scaled_dot_product_attention", [q, k, v], {"enable_gqa": True, **extra}, plain)
        assert caught.value.clause == "ATTN"


def test_a_biasing_float_mask_or_dropout_is_outside_attention():
    q, k, v = _qkv(torch.Generator().manual_seed(1))
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    with pytest.raises(Unmapped, match="adds a bias"):
        map_call(
            "Functional.scaled_dot_product_attention",
            [q, k, v, torch.randn(5, 5)],
            {"enable_gqa": True},
            [out],
        )
    with pytest.raises(Unmapped, match="dropout_p"):
        map_call(
            "Functional.scaled_dot_product_attention",
            [q, k, v],
            {"dropout_p": 0.1, "enable_gqa": True},
            [out],
        )


@pytest.mark.parametrize("activate_left", [False, True])
@pytest.mark.parametrize("approximate", [0, 1])
def test_npu_geglu_gates_the_half_activate_left_names(activate_left, approximate):
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(2)) * 3
    kwargs = {"approximate": approximate, "activate_left": activate_left}
    _judge("NPU.npu_geglu", [x], kwargs, npu.npu_geglu(x, **kwargs))
    other = npu.npu_geglu(x, approximate=approximate, activate_left=not activate_left)
    with pytest.raises(ConformanceError):
        _judge("NPU.npu_geglu", [x], kwargs, other)


def test_npu_norms_and_swiglu_bind_positional_and_keyword_arguments_alike():
    g = torch.Generator().manual_seed(3)
    x, r, w = (
        torch.randn(4, 16, generator=g),
        torch.randn(4, 16, generator=g),
        torch.rand(16, generator=g) + 0.5,
    )
    _judge("NPU.npu_rms_norm", [x, w], {"epsilon": 1e-3}, npu.npu_rms_norm(x, w, 1e-3))
    _judge("NPU.npu_rms_norm", [x, w, 1e-3], {}, npu.npu_rms_norm(x, w, 1e-3))
    with pytest.raises(ConformanceError, match="NORM-RMS"):  # recorded with the default eps, run with 0.5
        _judge("NPU.npu_rms_norm", [x, w], {}, npu.npu_rms_norm(x, w, 0.5))
    _judge("NPU.npu_add_rms_norm", [x, r, w], {}, npu.npu_add_rms_norm(x, r, w))
    _judge("NPU.npu_swiglu", [x], {"dim": -1}, npu.npu_swiglu(x))
    with pytest.raises(Unmapped, match="not in its signature"):
        map_call("NPU.npu_rms_norm", [x, w], {"eps": 1e-6}, list(npu.npu_rms_norm(x, w)))
    with pytest.raises(Unmapped, match="outputs"):  # rstd's record alone: y not recorded
        map_call("NPU.npu_add_rms_norm", [x, r, w], {}, [npu.npu_add_rms_norm(x, r, w)[0]])


def test_npu_moe_gating_top_k_softmax_and_tanh_gelu_map_as_documented():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(6, 8, generator=g)
    _judge(
        "NPU.npu_moe_gating_top_k_softmax",
        [logits, None],
        {"k": 2},
        npu.npu_moe_gating_top_k_softmax(logits, k=2),
    )
    x = torch.randn(3, 8, generator=g) * 3
    _judge("Functional.gelu", [x], {"approximate": "tanh"}, F.gelu(x, approximate="tanh"))
    with pytest.raises(ConformanceError):
        _judge("Functional.gelu", [x], {"approximate": "tanh"}, F.gelu(x))
    with pytest.raises(Unmapped, match="tanh"):
        map_call("Functional.gelu", [x], {}, [F.gelu(x)])


def _rope_tables(g, tokens, width, mode):
    angles = torch.rand(tokens, width // 2, generator=g) * 6
    full = (lambda t: torch.cat([t, t], -1)) if mode == "half" else (lambda t: t.repeat_interleave(2, -1))
    return full(angles.cos()), full(angles.sin())


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_npu_rotary_mul_and_apply_rotary_pos_emb_rotate_as_their_mode_says(mode):
    g = torch.Generator().manual_seed(5)
    cos, sin = _rope_tables(g, 4, 8, mode)
    r1, r2 = cos[None, :, None], sin[None, :, None]  # BSND tables, one per token
    x = torch.randn(1, 4, 3, 8, generator=g)
    other = "interleave" if mode == "half" else "half"
    _judge("NPU.npu_rotary_mul", [x, r1, r2], {"rotary_mode": mode}, npu.npu_rotary_mul(x, r1, r2, mode))
    with pytest.raises(ConformanceError, match="ROPE-APPLY"):
        _judge("NPU.npu_rotary_mul", [x, r1, r2], {"rotary_mode": mode}, npu.npu_rotary_mul(x, r1, r2, other))
    q, k = torch.randn(1, 4, 3, 8, generator=g), torch.randn(1, 4, 1, 8, generator=g)
    before = [q.clone(), k.clone()]  # the op rotates in place; msprobe records the inputs before the call
    out = npu.npu_apply_rotary_pos_emb(q, k, r1, r2, 1, mode)
    _judge("NPU.npu_apply_rotary_pos_emb", [*before, r1, r2], {"layout": 1, "rotary_mode": mode}, out)
    with pytest.raises(Unmapped, match="not one angle per rotated pair"):
        map_call("NPU.npu_rotary_mul", [x, r1, torch.rand_like(r2)], {"rotary_mode": mode}, [x])


def _fia_record(layout, q, k, v, **kwargs):
    """The emulator's FIA on BNSD inputs, and the call as recorded in ``layout`` (BSND, BSH: the
    same tensors transposed or merged, as the layouts are documented)."""
    out, lse = npu.npu_fused_infer_attention_score(q, k, v, input_layout="BNSD", **kwargs)

    def to(t):
        t = t.transpose(1, 2) if layout != "BNSD" else t
        return t.flatten(2) if layout == "BSH" else t

    return [to(q), to(k), to(v)], {**kwargs, "input_layout": layout}, [to(out), lse]


@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH"])
def test_fia_maps_its_mask_polarity_modes_lengths_and_scale(layout):
    from backends.npu_emulator.compressed_mask import reference as compressed

    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, h, 5, 8, generator=g) for h in (4, 2, 2))
    masked = torch.rand(5, 5, generator=g) > 0.6
    masked[:, 0] = False  # every row keeps a key
    heads = {"num_heads": 4, "num_key_value_heads": 2, "scale": 0.3}
    forms = [
        {"atten_mask": masked, **heads},
        {"atten_mask": compressed(), "sparse_mode": 2, **heads},
        {"pre_tokens": 1, "next_tokens": 0, **heads},
        {"num_heads": 4, "num_key_value_heads": 2},  # scale left at its documented default 1.0
    ]
    for kwargs in forms:
        _judge("NPU.npu_fused_infer_attention_score", *_fia_record(layout, q, k, v, **kwargs))
    api = "NPU.npu_fused_infer_attention_score"
    inverted = _fia_record(layout, q, k, v, atten_mask=~masked, **heads)[2]  # the torch polarity
    with pytest.raises(ConformanceError, match="ATTN"):
        _judge(api, *_fia_record(layout, q, k, v, atten_mask=masked, **heads)[:2], inverted)
    root_d = _fia_record(layout, q, k, v, num_heads=4, num_key_value_heads=2, scale=8**-0.5)[2]
    with pytest.raises(ConformanceError, match="ATTN"):
        _judge(api, *_fia_record(layout, q, k, v, num_heads=4, num_key_value_heads=2)[:2], root_d)


def test_fia_decode_reads_only_the_mask_and_kv_lengths():
    g = torch.Generator().manual_seed(7)
    q, k, v = (
        torch.randn(2, 4, 1, 8, generator=g),
        torch.randn(2, 4, 6, 8, generator=g),
        torch.randn(2, 4, 6, 8),
    )
    kwargs = {
        "num_heads": 4,
        "scale": 0.35,
        "actual_seq_lengths_kv": [3, 6],
        "pre_tokens": 0,
        "sparse_mode": 0,
    }
    _judge("NPU.npu_fused_infer_attention_score", *_fia_record("BNSD", q, k, v, **kwargs))
    full = _fia_record("BNSD", q, k, v, **{**kwargs, "actual_seq_lengths_kv": [6, 6]})[2]
    with pytest.raises(ConformanceError, match="ATTN"):
        _judge("NPU.npu_fused_infer_attention_score", *_fia_record("BNSD", q, k, v, **kwargs)[:2], full)
    with pytest.raises(Unmapped, match="quantization"):
        map_call("NPU.npu_fused_infer_attention_score", [q, k, v], {"dequant_scale1": torch.ones(1)}, full)

"""Replay rows of the serving, attention-mask, MoE and rope ops (``ops.REPLAY_OPS``, docs/capture.md).

Each row applies the tolerance rule its op's conformance property applies: ATTN-TOL's value
scale for ``attention`` (conformance/test_attention.py) and, per packed row and head over the
row's sequence, for ``paged_attention`` (conformance/test_serving.py, ``packed_value_scale``,
the caches dequantized first when they are fp8: KV-FP8-READ); MOE-TOL's ``moe_magnitude`` for
``fused_moe``; MOE-TIES and MOE-PADDED for ``select_experts``, judged by
``conformance.moe_checks.judge_routing`` (any slot order, ties accepted: no per-element
allowance); ROPE-TOL's ``pair_scale`` per output for ``rotary_embedding`` and ``mrope`` and
``angle_scale`` for ``rope_cos_sin`` (conformance/test_rope.py); ``write_kv_cache`` bit for bit
(KV-WRITE, as conformance/test_kv_cache.py): the recorder records its caches before the call as
inputs and after it as outputs (``recorder.WRITTEN``), and the oracle writes into copies of the first.
"""

from __future__ import annotations

import torch

from conformance.tolerances import angle_scale, moe_magnitude, pair_scale, value_scale
from reference.kv_cache import dequantized_caches

MOE_TENSORS = ("x", "w13", "w2", "topk_weights", "topk_ids")
SERVE_KEYWORDS = frozenset({"block_table", "cu_seqlens_q", "seq_lens", "sinks", "k_scale", "v_scale"})


def packed_value_scale(inputs: dict, options: dict) -> torch.Tensor:
    """ATTN-TOL per row of paged_attention's packed output [T, Hq, 1]: max(1, max_j |v_j|) over the
    positions 0..L_b - 1 of the row's sequence, read through its block table, per query head."""
    scales = {n: inputs.get(n, options.get(n)) for n in ("k_scale", "v_scale")}
    _, v_cache = dequantized_caches(
        inputs["k_cache"], inputs["v_cache"], scales["k_scale"], scales["v_scale"], torch.float64
    )
    block_size, q_heads = v_cache.shape[1], inputs["q"].shape[1]
    table, starts, lengths = (inputs[n].long() for n in ("block_table", "cu_seqlens_q", "seq_lens"))
    parts = []
    for b, length in enumerate(lengths.tolist()):
        blocks = table[b, : -(-length // block_size)]
        values = v_cache[blocks].flatten(0, 1)[:length]  # [L_b, Hkv, Dv]
        per_head = value_scale(values.permute(1, 0, 2)[None], q_heads)[0, :, 0]  # [Hq, 1]
        parts.append(per_head.expand(int(starts[b + 1] - starts[b]), -1, -1))
    return torch.cat(parts)


def _routing_judge(inputs, options, outputs, *, clause, context):
    from conformance.moe_checks import judge_routing

    bias = inputs.get("correction_bias")
    routing = {k: v for k, v in options.items() if k != "correction_bias"}  # a None recorded as an option
    judge_routing(*outputs, inputs["router_logits"], bias, routing, clause=clause, context=context)


def _write_judge(inputs, options, outputs, *, clause, context):
    """KV-WRITE bit for bit: the oracle's write into copies of the caches as recorded before the
    call against the caches the kernel left (the recorder's outputs for write_kv_cache)."""
    from conformance.checks import check
    from reference.kv_cache import write_kv_cache

    caches = [inputs[n].clone() if n in inputs else None for n in ("k_cache", "v_cache")]
    scales = {n: inputs.get(n, options.get(n)) for n in ("k_scale", "v_scale")}
    write_kv_cache(inputs["key"], inputs.get("value"), *caches, inputs["slot_mapping"], **scales)
    want = [c for c in caches if c is not None]
    count = f"{len(outputs)} caches recorded after the call, expected {len(want)}"
    check(len(outputs) == len(want), clause=clause, message=f"{context}: {count}")
    for name, got, expected in zip(("k_cache", "v_cache"), outputs, want, strict=False):
        same_kind = got.shape == expected.shape and got.dtype == expected.dtype
        check(same_kind, clause=clause, message=f"{context}: {name} is {got.dtype} {tuple(got.shape)}")
        bits = [
            t.detach().cpu().contiguous().view(torch.uint8).reshape(*t.shape, -1) for t in (got, expected)
        ]
        where = bits[0].ne(bits[1]).any(-1).nonzero()
        if len(where):
            first = tuple(where[0].tolist())
            check(False, clause=clause, message=f"{context}: {name} after the call: {len(where)} elements "
                  f"differ from the oracle's write; first at {first}")  # fmt: skip


def _write_sample(generator, dtype):
    """Four tokens (one padded, slot -1) written into a pool of 3 blocks of 4, NHD, one head."""
    caches = {n: torch.randn(3, 4, 1, 8, generator=generator).to(dtype) for n in ("k_cache", "v_cache")}
    inputs = {"key": torch.randn(4, 1, 8, generator=generator).to(dtype),
              "value": torch.randn(4, 1, 8, generator=generator).to(dtype),
              **caches, "slot_mapping": torch.tensor([5, 0, -1, 9])}  # fmt: skip
    return inputs, {"k_scale": None, "v_scale": None}


def _cache_rows(inputs) -> torch.Tensor:
    """Each token's cache row for ROPE-TOL's magnitude; mrope (3-row positions) takes the largest."""
    rows = inputs["cos_sin_cache"].double()[inputs["positions"].long()]
    return rows.abs().amax(0) if inputs["positions"].dim() == 2 else rows


def _rope_scales(inputs, options):
    rows, neox = _cache_rows(inputs), options["is_neox_style"]
    return tuple(pair_scale(inputs[name].cpu(), rows, neox) for name in ("query", "key"))


def _cache(rotary_dim, length=16):
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv
    return torch.cat([angles.cos(), angles.sin()], -1).float()


def _rope_sample(mrope):
    def sample(generator, dtype):
        positions = torch.randint(0, 16, (3, 5) if mrope else (5,), generator=generator)
        inputs = {
            "positions": positions,
            "query": torch.randn(5, 2, 12, generator=generator).to(dtype),
            "key": torch.randn(5, 1, 12, generator=generator).to(dtype),
            "cos_sin_cache": _cache(8),
        }
        options = {"is_neox_style": True}
        if mrope:
            options.update(mrope_section=[2, 1, 1], mrope_interleaved=False)
        return inputs, options

    return sample


def _attention_sample(generator, dtype):
    q, k, v = (torch.randn(1, h, n, 8, generator=generator).to(dtype) for h, n in ((2, 5), (1, 6), (1, 6)))
    allowed = torch.rand(1, 1, 5, 6, generator=generator) < 0.6
    return {"q": q, "k": k, "v": v, "allowed": allowed}, {"scale": 8**-0.5}


def _paged_sample(generator, dtype):
    """Two sequences (L = 5 and 3, the last 2 and 1 positions queried) in a permuted pool of 6 blocks of 4."""
    inputs = {
        "q": torch.randn(3, 2, 8, generator=generator).to(dtype),
        "k_cache": torch.randn(6, 4, 1, 8, generator=generator).to(dtype),
        "v_cache": torch.randn(6, 4, 1, 8, generator=generator).to(dtype) * 3,
        "block_table": torch.tensor([[3, 1], [4, 0]], dtype=torch.int32),
        "cu_seqlens_q": torch.tensor([0, 2, 3], dtype=torch.int32),
        "seq_lens": torch.tensor([5, 3], dtype=torch.int32),
        "sinks": torch.randn(2, generator=generator),
    }
    options = {"sliding_window": None, "softcap": None, "scale": 8**-0.5, "k_scale": None, "v_scale": None}
    return inputs, options


def _moe_sample(generator, dtype, experts=4, hidden=8, inter=6):
    ids = torch.stack([torch.randperm(experts, generator=generator)[:2] for _ in range(4)])
    inputs = {
        "x": torch.randn(4, hidden, generator=generator).to(dtype),
        "w13": (torch.randn(experts, 2 * inter, hidden, generator=generator) / 3).to(dtype),
        "w2": (torch.randn(experts, hidden, inter, generator=generator) / 3).to(dtype),
        "topk_weights": torch.rand(4, 2, generator=generator),
        "topk_ids": ids,
    }
    options = {
        "activation": "silu",
        "limit": None,
        "apply_router_weight_on_input": False,
        "output_scale": 1.0,
    }
    return inputs, options


def _routing_sample(generator, dtype):
    logits = torch.arange(32, dtype=torch.float32)[torch.randperm(32, generator=generator)].reshape(4, 8) / 8
    options = {
        "top_k": 2,
        "scoring": "softmax",
        "renormalize": True,
        "correction_bias": None,
        "num_groups": 1,
        "topk_group": 1,
        "group_score": "max",
        "routed_scaling_factor": 1.0,
    }
    return {"router_logits": logits}, options


def _cos_sin_sample(generator, dtype):
    dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32  # the rope-cos-sin rows
    inv = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    return {"positions": torch.randint(0, 4096, (6,), generator=generator), "inv_freq": inv.to(dtype)}, {
        "attention_factor": 1.0
    }


def ROWS(row):  # noqa: N802 (the row type, passed in: ops imports this module)
    """The rows, built with ``row`` (``ops.ReplayOp``)."""
    rope = ("positions", "query", "key", "cos_sin_cache")
    return (
        row(
            "attention",
            "reference.attention:attention",
            "ATTN",
            "attention",
            ("q", "k", "v", "allowed"),
            ("scale",),
            ("out",),
            atol_scale=lambda i, o: value_scale(i["v"], i["q"].shape[1]),
            sample=_attention_sample,
            keywords=frozenset({"allowed"}),
        ),
        row(
            "paged_attention",
            "reference.serving:paged_attention",
            "SERVE",
            "attention",
            ("q", "k_cache", "v_cache", *sorted(SERVE_KEYWORDS)),
            ("sliding_window", "softcap", "scale"),
            ("out",),
            atol_scale=packed_value_scale,
            sample=_paged_sample,
            keywords=SERVE_KEYWORDS,
        ),
        row(
            "fused_moe",
            "reference.moe:fused_moe",
            "MOE-FUSED",
            "moe",
            MOE_TENSORS,
            ("activation", "limit", "apply_router_weight_on_input", "output_scale"),
            ("out",),
            atol_scale=lambda i, o: moe_magnitude(*(i[n] for n in MOE_TENSORS), **o),
            sample=_moe_sample,
        ),
        row(
            "select_experts",
            "reference.moe:select_experts",
            "MOE-SELECT",
            "moe-routing",
            ("router_logits", "correction_bias"),
            (
                "top_k",
                "scoring",
                "renormalize",
                "num_groups",
                "topk_group",
                "group_score",
                "routed_scaling_factor",
            ),
            ("weights", "ids"),
            sample=_routing_sample,
            keywords=frozenset({"correction_bias"}),
            judge=_routing_judge,
        ),
        row(
            "rotary_embedding",
            "reference.rope:rotary_embedding",
            "ROPE-APPLY",
            "rope",
            rope,
            ("is_neox_style",),
            ("query", "key"),
            atol_scale=_rope_scales,
            sample=_rope_sample(False),
            dtype_from="query",
        ),
        row(
            "mrope",
            "reference.rope:mrope",
            "ROPE-MROPE",
            "rope",
            rope,
            ("mrope_section", "is_neox_style", "mrope_interleaved"),
            ("query", "key"),
            atol_scale=_rope_scales,
            sample=_rope_sample(True),
            dtype_from="query",
        ),
        row(
            "rope_cos_sin",
            "reference.rope:rope_cos_sin",
            "ROPE-COS-SIN",
            "rope-cos-sin",
            ("positions", "inv_freq"),
            ("attention_factor",),
            ("out",),
            sample=_cos_sin_sample,
            dtype_from="inv_freq",
            atol_scale=lambda i, o: angle_scale(i["positions"], i["inv_freq"], o["attention_factor"]),
        ),
        row(
            "write_kv_cache", "reference.kv_cache:write_kv_cache", "KV-WRITE", "bit-exact",
            ("key", "value", "k_cache", "v_cache", "slot_mapping", "k_scale", "v_scale"), (),
            ("k_cache", "v_cache"), sample=_write_sample, keywords=frozenset({"k_scale", "v_scale"}),
            judge=_write_judge,
        ),
    )  # fmt: skip

"""msprobe's attention APIs -> the ``attention`` contract op (spec/ascend.md, MSPROBE-MAP):
torch's ``scaled_dot_product_attention`` and torch_npu's ``npu_fused_infer_attention_score``,
each call's mask, causality, lengths and scale turned into ATTN's ``allowed`` and ``scale``."""

from __future__ import annotations

import math

import torch

from opconform.capture.msprobe_binding import REQUIRED, Mapped, Mapping, Unmapped, tensor_arg

_MAP = "spec/ascend.md, MSPROBE-MAP"


def _sdpa(bound: dict, outputs: list) -> Mapped:
    api = "scaled_dot_product_attention"
    q, k, v = (tensor_arg(bound, n, api) for n in ("query", "key", "value"))
    if q.dim() != 4 or k.dim() != 4:
        raise Unmapped(f"{api}: {q.dim()}-d query; the contract op takes [B, H, S, D]")
    if bound["dropout_p"]:
        raise Unmapped(f"{api}: dropout_p={bound['dropout_p']} drops at random; not a function of the inputs")
    q_len, kv_len = q.shape[-2], k.shape[-2]
    allowed = torch.ones(q_len, kv_len, dtype=torch.bool)
    mask = bound["attn_mask"]
    if mask is not None:
        if mask.dtype == torch.bool:
            allowed = allowed & mask
        elif bool(((mask == 0) | (mask == float("-inf"))).all()):  # additive 0 / -inf: a boolean mask
            allowed = allowed & (mask == 0)
        else:
            raise Unmapped(
                f"{api}: a float attn_mask of finite non-zero values adds a bias; attention has none"
            )
    if bound["is_causal"]:  # torch's documented reference: ones(L, S).tril(diagonal=0)
        allowed = allowed & torch.ones(q_len, kv_len, dtype=torch.bool).tril(diagonal=0)
    if q.shape[1] != k.shape[1] and not bound["enable_gqa"]:
        raise Unmapped(f"{api}: {q.shape[1]} query heads, {k.shape[1]} key heads without enable_gqa")
    scale = bound["scale"]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return Mapped("attention", {"q": q, "k": k, "v": v, "allowed": allowed}, {"scale": scale}, outputs[:1])


ATTENTION_MAPPINGS: dict[str, Mapping] = {
    "Functional.scaled_dot_product_attention": Mapping(
        (
            ("query", REQUIRED),
            ("key", REQUIRED),
            ("value", REQUIRED),
            ("attn_mask", None),
            ("dropout_p", 0.0),
            ("is_causal", False),
            ("scale", None),
            ("enable_gqa", False),
        ),
        _sdpa,
        _MAP,
    ),  # fmt: skip
}

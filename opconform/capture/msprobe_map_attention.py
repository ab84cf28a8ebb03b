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
    return _attention(q, k, v, allowed, scale, outputs[:1])


def _attention(q, k, v, allowed: torch.Tensor, scale, outputs: list) -> Mapped:
    """The attention call; a query row with no allowed key is not compared (torch's value there is
    NaN or 0 by kernel, FIA's undocumented): zero in the recorded output, as ATTN's oracle gives."""
    if outputs and isinstance(outputs[0], torch.Tensor) and not bool(allowed.any(-1).all()):
        outputs = [torch.where(allowed.any(-1, keepdim=True), outputs[0], 0), *outputs[1:]]
    return Mapped("attention", {"q": q, "k": k, "v": v, "allowed": allowed}, {"scale": scale}, outputs)


FIA_LAYOUTS = ("BNSD", "BSND", "BSH")  # the layouts of one sequence per batch row, unpaged
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)  # CANN-FIA-MASK: True / 1 = masked out


def _bnsd(t: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.reshape(t.shape[0], t.shape[1], heads, -1).transpose(1, 2)
    return t


def _holds_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) or isinstance(value, list) and any(map(_holds_tensor, value))


def _fia(bound: dict, outputs: list) -> Mapped:
    """CANN-FIA's arithmetic on BNSD, BSND or BSH without paging, quantization or rope inputs:
    allowed = not masked by atten_mask (True = masked), the sparse mode's band or causal triangle
    (CANN-FIA-SPARSE, the emulator's ``_masked_by_mode``), nor past actual_seq_lengths_kv;
    at query length 1 only the mask and the kv lengths (CANN-FIA-DECODE)."""
    from backends.npu_emulator.attention import _masked_by_mode  # the documented modes, written once

    api = "npu_fused_infer_attention_score"
    rest = dict(bound["rest"])
    if "scale_value" in rest:  # the older editions' name of scale (CANN-FIA)
        bound["scale"] = rest.pop("scale_value")
    given = sorted(name for name, value in rest.items() if _holds_tensor(value))
    if given:  # quantization scales, rope inputs, pse, shared prefixes: no argument of attention
        raise Unmapped(
            f"{api}: {', '.join(given)} given: mapped are calls without quantization, rope or pse inputs"
        )
    layout, heads = bound["input_layout"], bound["num_heads"]
    if (
        layout not in FIA_LAYOUTS
        or bound["block_table"] is not None
        or bound["actual_seq_lengths"] is not None
    ):
        raise Unmapped(f"{api}: layout {layout!r}, paged or with actual_seq_lengths: mapped are "
                       f"{'/'.join(FIA_LAYOUTS)} without a block_table or query lengths")  # fmt: skip
    kv_heads = bound["num_key_value_heads"] or heads
    q, k, v = (tensor_arg(bound, n, api) for n in ("query", "key", "value"))
    if q.dim() != (3 if layout == "BSH" else 4) or (layout == "BSH" and q.shape[-1] % heads):
        raise Unmapped(f"{api}: query {tuple(q.shape)} does not fit {layout} with {heads} heads")
    q, k, v = _bnsd(q, layout, heads), _bnsd(k, layout, kv_heads), _bnsd(v, layout, kv_heads)
    batch, _, q_len, _ = q.shape
    kv_len = k.shape[2]
    lengths = bound["actual_seq_lengths_kv"]
    kv_lens = torch.full((batch,), kv_len) if lengths is None else torch.as_tensor(lengths).long().flatten()
    if kv_lens.numel() != batch:
        raise Unmapped(f"{api}: actual_seq_lengths_kv {kv_lens.tolist()} is not one length per batch row")
    mask, mode = bound["atten_mask"], bound["sparse_mode"]
    if mask is not None and mask.dtype not in MASK_DTYPES:
        raise Unmapped(f"{api}: atten_mask of {mask.dtype}: the op takes bool, int8 or uint8 (CANN-FIA-MASK)")
    if mode in (3, 4) and lengths is not None:
        raise Unmapped(f"{api}: sparse_mode {mode} with actual lengths: the per-batch offset is inferred")
    try:
        if q_len == 1 and k.shape[-1] == v.shape[-1]:  # CANN-FIA-DECODE: pre/next tokens, sparse_mode invalid
            masked = torch.zeros(batch, 1, 1, kv_len, dtype=torch.bool)
            masked = masked if mask is None else masked | mask.bool().reshape(-1, 1, 1, kv_len)
        else:
            full = torch.full((batch,), q_len)
            masked = _masked_by_mode(mode, mask, bound["pre_tokens"], bound["next_tokens"], q_len, kv_len,
                                     full, kv_lens, batch)  # fmt: skip
    except RuntimeError as exc:
        raise Unmapped(f"{api}: {' '.join(str(exc).split())}") from None
    masked = masked | (torch.arange(kv_len)[None, :] >= kv_lens[:, None])[:, None, None, :]
    out = [_bnsd(outputs[0], layout, heads)] if outputs and isinstance(outputs[0], torch.Tensor) else []
    return _attention(q, k, v, ~masked, bound["scale"], out)


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
    "NPU.npu_fused_infer_attention_score": Mapping(
        (
            ("query", REQUIRED),
            ("key", REQUIRED),
            ("value", REQUIRED),
            ("atten_mask", None),
            ("actual_seq_lengths", None),
            ("actual_seq_lengths_kv", None),
            ("num_heads", 1),
            ("scale", 1.0),
            ("pre_tokens", 2147483647),
            ("next_tokens", 2147483647),
            ("input_layout", "BSH"),
            ("num_key_value_heads", 0),
            ("sparse_mode", 0),
            ("block_table", None),
            ("block_size", 0),
            ("inner_precise", 0),
            ("softmax_lse_flag", False),
        ),
        _fia,
        "spec/ascend.md, CANN-FIA",
        rest=True,
    ),  # fmt: skip
}

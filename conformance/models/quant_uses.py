"""MODEL-QUANT (spec/models.md): the quant ops of a model whose config has a ``quantization_config``.

QUANT-CONFIG's reader (``reference.quant_config.quant_scheme``) gives the scheme; the model's
quantized linear layers give the GEMM shapes (K, N) its ops run at. The pins are those shapes
(``quant.linear``), the fp8 format with its blocks and scale format (``quant.fp8``), the int8
scales' granularity (``quant.int8_scales``) and the int4 groups (``quant.w4a16``); the quant
strategies draw them (``conformance.strategies.quant``), K exactly, N cut to a few columns or
blocks. A model without a ``quantization_config`` calls no quant op.
"""

from __future__ import annotations

from conformance.models.profile import Derived, _get
from reference.quant_config import quant_scheme

LINEAR = "quant.linear"  # (K, N) of each quantized linear layer


def _expert_width(config) -> int:
    return int(_get(config, "moe_intermediate_size") or _get(config, "intermediate_size"))


def _attention_shapes(config) -> list[tuple[str, int, int]]:
    """(name, K, N) of the attention projections: MLA's low-rank ones (DeepSeek) or fused q/k/v."""
    hidden, heads = int(_get(config, "hidden_size")), int(_get(config, "num_attention_heads"))
    nope, rope = _get(config, "qk_nope_head_dim"), _get(config, "qk_rope_head_dim")
    if nope and rope:
        qk, v = int(nope) + int(rope), int(_get(config, "v_head_dim"))
        kv_rank = int(_get(config, "kv_lora_rank"))
        q_rank = _get(config, "q_lora_rank")
        q = [("q_a_proj", hidden, int(q_rank)), ("q_b_proj", int(q_rank), heads * qk)] if q_rank else [
            ("q_proj", hidden, heads * qk)]  # fmt: skip
        return [*q, ("kv_a_proj_with_mqa", hidden, kv_rank + int(rope)),
                ("kv_b_proj", kv_rank, heads * (int(nope) + v)), ("o_proj", heads * v, hidden)]  # fmt: skip
    kv_heads = int(_get(config, "num_key_value_heads", heads))
    head_dim = int(_get(config, "head_dim", None) or hidden // heads)
    return [("qkv_proj", hidden, (heads + 2 * kv_heads) * head_dim), ("o_proj", heads * head_dim, hidden)]


def linear_shapes(config, moe_layers: set[int]) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """MODEL-QUANT: (name, K, N, layers) of each quantized linear layer: the attention projections,
    the dense MLP's gate_up and down, the routed and shared experts' (one expert's GEMM)."""
    layers = tuple(range(int(_get(config, "num_hidden_layers"))))
    moe, dense = tuple(i for i in layers if i in moe_layers), tuple(i for i in layers if i not in moe_layers)
    hidden = int(_get(config, "hidden_size"))
    found = [(name, k, n, layers) for name, k, n in _attention_shapes(config)]
    if dense:
        inter = int(_get(config, "intermediate_size"))
        found += [("gate_up_proj", hidden, 2 * inter, dense), ("down_proj", inter, hidden, dense)]
    if moe:
        width = _expert_width(config)
        found += [("experts.gate_up_proj", hidden, 2 * width, moe), ("experts.down_proj", width, hidden, moe)]
        shared = int(_get(config, "n_shared_experts", 0) or 0) * width
        if shared:
            found += [("shared_experts.gate_up_proj", hidden, 2 * shared, moe),
                      ("shared_experts.down_proj", shared, hidden, moe)]  # fmt: skip
    return found


def _gemms(derived: Derived, op: str, shapes, extra: dict) -> None:
    for name, k, n, layers in shapes:
        for layer in layers:
            derived.add(op, name, {"in_features": k, "out_features": n, **extra}, layer)
        derived.pin(LINEAR, (k, n), op)


def quant_uses(derived: Derived, config, moe_layers: set[int]) -> None:
    """MODEL-QUANT: the scheme's ops at the model's linear layers, with their pins; quant_scheme on
    the config itself (the config pin, ``families.derive``)."""
    if _get(config, "quantization_config") is None:
        return
    scheme = quant_scheme(config)
    shapes = linear_shapes(config, moe_layers)
    derived.add("quant_scheme", "all", {"method": scheme["method"]}, None)
    if scheme["method"] == "fp8" and scheme["block_size"] is not None:
        dtype, block, ue8m0 = scheme["fp8_dtype"], scheme["block_size"], scheme["use_ue8m0"]
        fmt = {"fp8_dtype": str(dtype).removeprefix("torch."), "use_ue8m0": ue8m0}
        derived.add("fp8_group_quant", "all", {"group_size": block[1], **fmt}, None)
        _gemms(derived, "fp8_block_scaled_mm", shapes, {"block_size": list(block), **fmt})
        derived.pin("quant.fp8", (dtype, block, ue8m0), "fp8_group_quant", "fp8_block_scaled_mm")
        derived.pin(LINEAR, shapes[0][1:3], "fp8_group_quant")  # the K of every shape is pinned above
        if not ue8m0:
            derived.unused_clauses["QUANT-FP8-UE8M0"] = "float32 block scales (no scale_fmt: ue8m0)"
    elif scheme["method"] == "fp8":  # per-tensor fp8: its own clauses, drawn as in the generic run
        derived.add("fp8_quant", "all", {"activation_scheme": scheme["activation_scheme"]}, None)
    elif scheme["method"] == "w8a8-int8":
        per_tensor = (scheme["activation_scales"] == "tensor", scheme["weight_scales"] == "tensor")
        granularity = {key: scheme[key] for key in ("weight_scales", "activation_scales")}
        derived.add("dynamic_int8_quant", "all", {}, None)
        derived.pin(LINEAR, shapes[0][1:3], "dynamic_int8_quant")
        dense = [s for s in shapes if not s[0].startswith("experts.")]
        _gemms(derived, "int8_scaled_mm", dense, granularity)
        derived.pin("quant.int8_scales", per_tensor, "int8_scaled_mm")
        if len(dense) < len(shapes):  # routed experts: the w8a8 expert op (drawn as in the generic run)
            derived.add("w8a8_fused_moe", "moe", {}, None)
    else:  # w4a16: AWQ / GPTQ groups
        params = {"group_size": scheme["group_size"], "packing": scheme["packing"]}
        _gemms(derived, "w4a16_mm", shapes, params)
        derived.pin("quant.w4a16", (scheme["group_size"], scheme["packing"]), "w4a16_mm")


__all__ = ["LINEAR", "linear_shapes", "quant_uses"]

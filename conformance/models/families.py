"""MODEL-FAMILIES (spec/models.md): every op of each family a model uses, at the model's configuration.

``profile.derive`` lists the ops the model's layers call. ``derive`` here adds the rest of those
ops' families: the rope readers, cos/sin rows and style flags at the model's rope, the kernels'
window arguments at its windows, the router reader on its config, its shared-expert slots, the
fused expert computation at its expert count, top-k and (scaled) sizes, and the gated activations'
widths; every other op of a family it uses gets the reason it is not called (``unused_ops``).
tests/test_model_pins.py checks that no op of a used family is left out, against
``backends.protocols``, and that each used op's properties draw its pins.
"""

from __future__ import annotations

from math import gcd, isqrt

from backends.protocols import FAMILIES, OPS, protocol_ops
from conformance.models import profile
from conformance.models.profile import UNSOURCED, Derived, OpUse, _get, _per_type_rope
from conformance.models.quant_uses import quant_uses
from reference.moe_config import moe_router_config
from reference.rope_config import rope_inv_freq, rope_parameters
from reference.serving_windows import layer_windows

# MODEL-MOE: the float64 oracle holds fused_moe's w13 and w2, 3 E I H elements. Above this many the
# model's hidden and intermediate sizes are scaled down by one factor (I/H kept exactly; the expert
# count and top-k are the model's own).
EXPERT_WEIGHTS_BUDGET = 1 << 21
# fused_moe's activation for the op a model's experts gate with (spec/moe.md, MOE-FUSED).
FUSED_ACTIVATIONS = {
    "silu_and_mul": "silu",
    "swiglu_step_and_mul": "swiglustep",
    "swiglu_oai_and_mul": "swiglu_oai",
}
GATED_OPS = ("gelu_and_mul", "silu_and_mul", "swiglu_step_and_mul", "swiglu_oai_and_mul")
# MODEL-ROPE: the ROPE-FREQ refinement of each rope type that has one.
ROPE_TYPE_CLAUSES = {"llama3": "ROPE-FREQ-LLAMA3", "yarn": "ROPE-FREQ-YARN", "dynamic": "ROPE-FREQ-DYNAMIC",
                     "longrope": "ROPE-FREQ-LONGROPE"}  # fmt: skip
# The pin that carries (name, the model's config object) itself: config-level ops' properties read it.
CONFIG_PIN = "model.config"
# MODEL-FAMILIES: why a model does not call an op of a family it uses (given only when it does not).
UNUSED = {
    "gelu_and_mul": "its gated activations are not GELUs",
    "silu_and_mul": "its gated activations are not plain SwiGLU",
    "swiglu_step_and_mul": "no SwiGLU-step (Step-3.5's clamp)",
    "silu_clamped_and_mul": "no gate clamped before the SiLU",
    "swiglu_oai_and_mul": "no gpt-oss SwiGLU",
    "swiglu_limit": "no per-layer clamp limit lists (ACT-LIMIT-CONFIG reads Step-3.5's)",
    "npu_geglu_args": "no GELU gate",
    "npu_gelu_variant_args": "no elementwise GELU",
    "new_gelu": "no elementwise GELU",
    "fast_gelu": "no elementwise GELU",
    "quick_gelu": "no elementwise GELU",
    "situ_and_mul": "no SiTU",
    "rms_norm": "its norm is Gemma's (1 + w)",
    "fused_add_rms_norm": "its norm is Gemma's (1 + w)",
    "gemma_rms_norm": "its norm is plain RMSNorm",
    "gemma_fused_add_rms_norm": "its norm is plain RMSNorm",
    "rotary_embedding": "its rope has mrope sections (mrope)",
    "mrope": "no mrope sections",
    "rope_softmax_scale": "a rope per layer type: its scale is the base scale (MODEL-ATTENTION), the "
    "reader takes one flat rope",
    "append_shared_experts": "no shared experts",
    "swa_decode_mask": "its text encoder never decodes",
    "decode_mask_window": "its text encoder never decodes",
    "decode_attention": "its text encoder never decodes",
    "attention": "its encoder attends through prefill_attention (window and padding as arguments)",
    # MODEL-QUANT: the quant ops a quantization scheme does not call
    "dynamic_int8_quant": "no int8 activations",
    "int8_scaled_mm": "no int8 GEMMs",
    "fp8_quant": "no per-tensor fp8 activations",
    "fp8_group_quant": "no per-token-group fp8 activations",
    "fp8_block_scaled_mm": "no block-scaled fp8 weights",
    "fp8_fn_to_fnuz": "no e4m3fnuz serving (the e4m3fn to e4m3fnuz conversion is a ROCm load step)",
    "w4a16_mm": "no int4 weight-only layers",
    "w8a8_fused_moe": "no int8 experts",
}


def scaled_expert_sizes(hidden: int, inter: int, experts: int) -> tuple[int, int]:
    """MODEL-MOE: (H, I) with I/H exactly the model's and 3 E I H at most EXPERT_WEIGHTS_BUDGET
    (or the smallest pair of that ratio), never above the model's own."""
    g = gcd(hidden, inter)
    h, i = hidden // g, inter // g
    factor = min(g, max(1, isqrt(EXPERT_WEIGHTS_BUDGET // (3 * experts * h * i))))
    return h * factor, i * factor


def rope_seq_lens(d: dict) -> tuple:
    """ROPE-FREQ's sequence lengths at a rope's thresholds: None (the config's own), 1, the max
    positions and the pretraining length (dynamic NTK's and LongRoPE's switch) each - 1, + 0, + 1,
    and 4 x the max."""
    longest = d["max_position_embeddings"]
    edges = (longest, d.get("original_max_position_embeddings", longest))
    return (None, *sorted({1, 4 * longest} | {e + k for e in edges for k in (-1, 0, 1) if e + k >= 1}))


def _uses(derived: Derived, *ops: str) -> list[OpUse]:
    return [u for u in derived.uses if u.op in ops]


def _add_per_layer(derived: Derived, op: str, kind: str, params: dict, layers) -> None:
    for layer in layers or (None,):
        derived.add(op, kind, params, layer)


def _rope_ops(derived: Derived, config) -> None:
    """MODEL-ROPE: rope_inv_freq and rope_cos_sin per layer type at its rope, rope_kernel_args at its
    style, rope_softmax_scale at its base scale (a flat rope); the rope-type clauses it skips."""
    rope_uses = _uses(derived, "rotary_embedding", "mrope")
    if not rope_uses:
        return
    per_type, types = _per_type_rope(config), set()
    for use in rope_uses:
        layer_type = use.kind if per_type else None
        d = rope_parameters(config, layer_type)
        inv, factor = rope_inv_freq(config, seq_len=None, layer_type=layer_type)
        width, longest = 2 * len(inv), d["max_position_embeddings"]
        reader = {"layer_type": layer_type, "rope_type": d["rope_type"]}
        rows = {"rotary_dim": width, "attention_factor": factor, "max_position_embeddings": longest}
        _add_per_layer(derived, "rope_inv_freq", use.kind, reader, use.layers)
        _add_per_layer(derived, "rope_cos_sin", use.kind, rows, use.layers)
        derived.pin("rope.config", (layer_type, d["rope_type"], rope_seq_lens(d)), "rope_inv_freq")
        derived.pin("rope.frequencies", (width, tuple(inv.tolist()), factor, longest), "rope_cos_sin")
        types.add(d["rope_type"])
    for style in derived.rope_styles:
        derived.add("rope_kernel_args", "all", {"is_neox_style": style}, None)
    if not per_type:
        for use in _uses(derived, "paged_attention"):
            base = float(_get(config, "query_pre_attn_scalar", use.params["head_dim"])) ** -0.5
            params = {"scale": base, "softmax_scale": use.params["scale"]}
            _add_per_layer(derived, "rope_softmax_scale", "all", params, use.layers)
            derived.pin("rope.base_scale", base, "rope_softmax_scale")
    for kind, clause in ROPE_TYPE_CLAUSES.items():
        if kind not in types:
            derived.unused_clauses[clause] = f"its rope type is {', '.join(sorted(types))}"
    if not per_type:
        derived.unused_clauses["ROPE-LAYER"] = "one rope for every layer"
    nested = _get(config, "rope_parameters") if per_type else {}
    if not any(p.get("rope_type") == "yarn" and p.get("truncate") is False for p in nested.values()):
        derived.unused_clauses["ROPE-LAYER-TRUNCATE"] = "no layer's YaRN dict sets truncate"


def _window_ops(derived: Derived) -> None:
    """MODEL-ATTENTION: window_kernel_args at each layer's window (None: full attention)."""
    for use in _uses(derived, "paged_attention"):
        params = {"sliding_window": use.params["sliding_window"]}
        _add_per_layer(derived, "window_kernel_args", use.kind, params, use.layers)


def _expert_intermediate(config) -> int:
    """MODEL-MOE: a routed expert's intermediate size (gpt-oss and Mixtral: intermediate_size)."""
    return int(_get(config, "moe_intermediate_size") or _get(config, "intermediate_size"))


def _shared_experts(config) -> tuple[int, int]:
    """MODEL-MOE: (count, MLP width) of the shared experts: DeepSeek's n_shared_experts of
    moe_intermediate_size each, Step-3.5's one of share_expert_dim; (0, 0) without."""
    count = int(_get(config, "n_shared_experts", 0) or 0)
    if count:
        return count, count * _expert_intermediate(config)
    width = int(_get(config, "share_expert_dim", 0) or 0)
    return (1, width) if width else (0, 0)


def _widths(derived: Derived, config) -> None:
    """MODEL-ACT: each gated activation's width, its MLP's intermediate size: the dense layers',
    the routed experts', the shared experts' (a "moe-shared" use beside DeepSeek's "moe" one)."""
    count, shared = _shared_experts(config)
    widths = {"dense": _get(config, "intermediate_size"), "moe": _expert_intermediate,
              "moe-routed": _expert_intermediate, "moe-shared": shared}  # fmt: skip
    for index, use in enumerate(list(derived.uses)):
        if use.op not in GATED_OPS or use.kind not in widths:
            continue
        width = widths[use.kind]
        width = int(width(config) if callable(width) else width)
        derived.uses[index] = OpUse(use.op, use.kind, {**use.params, "width": width}, use.layers)
        derived.pin("activation.width", width, use.op)
        if use.kind == "moe" and count and use.op != "swiglu_oai_and_mul":  # DeepSeek's shared MLP
            _add_per_layer(derived, use.op, "moe-shared", {**use.params, "width": shared}, use.layers)
            derived.pin("activation.width", shared, use.op)


def _gelu_ops(derived: Derived) -> None:
    """MODEL-ACT: a GELU gate's mode, and the Ascend npu_geglu arguments at that mode."""
    for use in _uses(derived, "gelu_and_mul"):
        derived.pin("activation.approximate", use.params["approximate"], "gelu_and_mul")
        _add_per_layer(
            derived, "npu_geglu_args", use.kind, {"approximate": use.params["approximate"]}, use.layers
        )


def _expert_ops(derived: Derived, config) -> None:
    """MODEL-MOE: fused_moe at the model's expert count, top-k, activation and limit and its hidden
    and intermediate sizes (scaled_expert_sizes), append_shared_experts at its shared experts."""
    routing_uses = _uses(derived, "select_experts")
    if not routing_uses:
        return
    routing = moe_router_config(config)
    experts, top_k = routing_uses[0].params["num_experts"], routing["top_k"]
    hidden, inter = int(_get(config, "hidden_size")), _expert_intermediate(config)
    drawn_hidden, drawn_inter = scaled_expert_sizes(hidden, inter, experts)
    for use in _uses(derived, *FUSED_ACTIVATIONS):
        if use.kind not in ("moe", "moe-routed"):
            continue
        activation, limit = FUSED_ACTIVATIONS[use.op], use.params.get("limit")
        params = {"num_experts": experts, "top_k": top_k, "hidden_size": hidden, "intermediate_size": inter,
                  "drawn_hidden_size": drawn_hidden, "drawn_intermediate_size": drawn_inter,
                  "activation": activation, "limit": limit}  # fmt: skip
        _add_per_layer(derived, "fused_moe", "moe", params, use.layers)
        derived.pin("moe.fused", (experts, top_k, drawn_hidden, drawn_inter, activation, limit), "fused_moe")
    count, _ = _shared_experts(config)
    rsf = (
        routing["routed_scaling_factor"] if routing["routed_scaling_factor"] != 1 else routing["output_scale"]
    )
    if count:
        params = {"shared_experts": count, "routed_scaling_factor": rsf}
        _add_per_layer(derived, "append_shared_experts", "moe", params, routing_uses[0].layers)
        derived.pin("moe.shared", (experts, top_k, count, rsf), "append_shared_experts")


def pipeline_uses(derived: Derived, config, ops) -> None:
    """MODEL-SANA: a pipeline's other ops, (op, kind, params): the encoder's mask and window
    converters at each of its layers' windows, a gate at its given width."""
    windows = sorted(set(layer_windows(config)), key=lambda w: (w is not None, w or 0))
    for op, kind, params in ops:
        if op in ("encoder_attention_mask", "flash_attention_window", "cann_prefill_tokens"):
            for window in windows:  # the converters' properties are parametrized over windows
                derived.add(op, kind, {**params, "sliding_window": window}, None)
                if op == "encoder_attention_mask":
                    derived.pin("mask.window", window, op)
            continue
        derived.add(op, kind, params, None)
        if "width" in params:
            derived.pin("activation.width", params["width"], op)


def name_unused(derived: Derived) -> None:
    """MODEL-FAMILIES: each op of a family the model uses that it does not call, with UNUSED's reason
    (an op without one is left out, and tests/test_model_pins.py fails)."""
    for family in sorted({OPS[op] for op in derived.ops if op in OPS}):
        for op in protocol_ops(FAMILIES[family]):
            if op not in derived.ops and op in UNUSED:
                derived.unused_ops[op] = UNUSED[op]


def derive(config, *, name: str, title: str = "", pipeline=()) -> Derived:
    """MODEL-PROFILE, MODEL-FAMILIES: ``profile.derive``'s layer ops, then the rest of each family the
    model uses, the config pin, the pipeline's ops and the unused ops' reasons."""
    derived = profile.derive(config, name=name, title=title)
    _widths(derived, config)
    _gelu_ops(derived)
    _rope_ops(derived, config)
    _window_ops(derived)
    _expert_ops(derived, config)
    quant_uses(derived, config, profile.moe_layer_indices(config))
    pipeline_uses(derived, config, pipeline)
    config_ops = [op for op in ("layer_windows", "window_kernel_args", "moe_router_config", "swiglu_limit",
                                "rope_inv_freq", "rope_softmax_scale", "quant_scheme")
                  if op in derived.ops]  # fmt: skip
    derived.pin(CONFIG_PIN, (name, config), *config_ops)
    name_unused(derived)
    return derived


__all__ = ["CONFIG_PIN", "UNSOURCED", "derive", "name_unused", "scaled_expert_sizes"]

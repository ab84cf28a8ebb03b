"""A model profile (spec/models.md, MODEL-PROFILE): the published hyperparameters of one model, and
the ops its layers call with their fixed parameters, derived through the family oracles' config
readers (``layer_windows``, ``swiglu_limit``, ``rope_parameters``, ``rope_softmax_scale``,
``moe_router_config``), never re-implemented here.

``ModelProfile`` is data: the config class it is checked against and its keyword arguments (the
config.json fields), with their source. ``derive(config)`` takes the config object that class
builds (or one read from a config.json, ``conformance.models.configs``) and returns a ``Derived``:
one ``OpUse`` per (op, fixed parameters) with the layers that call it, and the pins the strategies
draw from (``conformance.strategies.common.pinned``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference.activations import swiglu_limit
from reference.moe_config import MODEL_TYPES as MOE_MODEL_TYPES
from reference.moe_config import moe_router_config
from reference.rope_config import rope_parameters, rope_softmax_scale
from reference.serving_windows import layer_windows

# spec/models.md, MODEL-NORM: the model types whose RMSNorm scales by (1 + w) (NORM-GEMMA).
GEMMA_NORM_TYPES = frozenset({"gemma", "gemma2", "gemma3_text", "step3p5"})
# MODEL-ROPE-STYLE: the model types that rotate GPT-J (interleaved) pairs when their config says
# ``rope_interleave`` (DeepSeek-V3); every other built-in rotates NeoX halves (``rotate_half``).
INTERLEAVE_FLAG_TYPES = frozenset({"deepseek_v3"})
# MODEL-PROFILE: a parameter the profile's sources do not give (drawn as in the generic run).
UNSOURCED = "not in the profile's sources (drawn)"
# MODEL-ACT: transformers' hidden_act names -> (op, fixed keywords).
GATED_ACTS = {
    "silu": ("silu_and_mul", {}),
    "gelu_pytorch_tanh": ("gelu_and_mul", {"approximate": "tanh"}),
    "gelu": ("gelu_and_mul", {"approximate": "none"}),
}


@dataclass(frozen=True)
class ModelProfile:
    """One built-in model: its name, title, spec clause, config class and published config."""

    name: str  # the --opconform-model NAME
    title: str
    clause: str  # MODEL-... in spec/models.md, where every number's source is written
    config_class: str  # "transformers.MistralConfig", "diffusers.DPMSolverMultistepScheduler"
    config: dict  # the config.json fields given to the class (the rest are the class defaults)
    source: str  # one line: where the numbers come from (the clause has them in full)
    ops: tuple[tuple[str, str, dict], ...] = ()  # a pipeline's other (op, kind, params) calls (SANA's)


@dataclass(frozen=True)
class OpUse:
    """An op a model calls with one set of fixed parameters, and the layers calling it so."""

    op: str
    kind: str  # the layer kind: "full_attention", "sliding_attention", "moe", "dense", "all", ...
    params: dict
    layers: tuple[int, ...]

    def as_dict(self) -> dict:
        return {"op": self.op, "kind": self.kind, "params": self.params, "layers": list(self.layers)}


@dataclass
class Derived:
    """Everything a profile run needs: the op uses, the pins, and the clauses the model does not use."""

    name: str
    title: str
    uses: list[OpUse] = field(default_factory=list)
    pins: dict[str, tuple] = field(default_factory=dict)
    unused_clauses: dict[str, str] = field(default_factory=dict)  # clause -> why the model skips it
    rope_styles: tuple[bool, ...] = ()  # is_neox_style values the model uses
    # MODEL-FAMILIES: each op of a family the model uses that it does not call -> why (family_ops)
    unused_ops: dict[str, str] = field(default_factory=dict)
    pinned_by: dict[str, list[str]] = field(default_factory=dict)  # op -> the pins its properties draw

    @property
    def ops(self) -> list[str]:
        return list(dict.fromkeys(u.op for u in self.uses))

    def add(self, op: str, kind: str, params: dict, layer: int | None) -> None:
        for i, use in enumerate(self.uses):
            if use.op == op and use.kind == kind and use.params == params:
                layers = use.layers if layer is None else (*use.layers, layer)
                self.uses[i] = OpUse(op, kind, params, layers)
                return
        self.uses.append(OpUse(op, kind, params, () if layer is None else (layer,)))

    def pin(self, key: str, value, *ops: str) -> None:
        """Fix ``key`` to (one more) ``value``: the strategies of ``ops``' properties draw it."""
        values = self.pins.get(key, ())
        if value not in values:
            self.pins[key] = (*values, value)
        for op in ops:
            keys = self.pinned_by.setdefault(op, [])
            if key not in keys:
                keys.append(key)

    def summary(self) -> dict:
        return {"title": self.title, "ops": [u.as_dict() for u in self.uses]}


def _get(config, name: str, default=None):
    value = config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)
    return default if value is None else value


def _layer(config, i: int):
    """Layer i's view of the config: transformers' per-layer override (Step-3.5's sliding heads)."""
    per_layer = getattr(config, "per_layer_config", None)
    try:
        return per_layer[i] if per_layer is not None and len(per_layer) > i else config
    except (TypeError, KeyError, IndexError):
        return config


def _per_type_rope(config) -> bool:
    """ROPE-LAYER: rope_parameters keyed by layer type (Gemma3, Step-3.5)."""
    value = _get(config, "rope_parameters")
    return isinstance(value, dict) and bool(value) and set(value) <= {"full_attention", "sliding_attention"}


def _scale(config, base: float) -> float:
    """MODEL-ATTENTION: ROPE-SOFTMAX-SCALE's reader on the base scale; a per-layer-type rope config
    (ROPE-LAYER) takes no mscale while every type is unscaled, and is refused otherwise."""
    if not _per_type_rope(config):
        return rope_softmax_scale(config, scale=base)
    kinds = {rope_parameters(config, t)["rope_type"] for t in config.rope_parameters}
    if kinds != {"default"}:
        raise ValueError(f"a per-layer-type rope with scaling {sorted(kinds)} has no derived softmax scale")
    return base


def _attention(derived: Derived, config) -> None:
    """MODEL-ATTENTION: heads, dims, window, softcap, sinks and scale per layer (paged_attention,
    write_kv_cache), the window per layer from SERVE-LAYER-WINDOWS' reader."""
    windows = layer_windows(config)
    layer_types = list(_get(config, "layer_types", None) or [])
    softcap = _get(config, "attn_logit_softcapping")
    sinks = _get(config, "model_type") == "gpt_oss"  # MODEL-GPT-OSS: learned per-head sinks
    for i, window in enumerate(windows):
        layer = _layer(config, i)
        heads = int(_get(layer, "num_attention_heads"))
        kv_heads = int(_get(layer, "num_key_value_heads", heads))
        nope, rope = _get(config, "qk_nope_head_dim"), _get(config, "qk_rope_head_dim")
        if nope and rope:  # MLA (DeepSeek): q/k of nope + rope dims, v of v_head_dim
            head_dim, value_dim = int(nope) + int(rope), int(_get(config, "v_head_dim"))
        else:
            head_dim = int(_get(layer, "head_dim", None) or _get(config, "hidden_size") // heads)
            value_dim = head_dim
        scale = _scale(config, float(_get(config, "query_pre_attn_scalar", head_dim)) ** -0.5)
        kind = (
            layer_types[i] if i < len(layer_types) else ("sliding_attention" if window else "full_attention")
        )
        params = {"num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim, "value_dim": value_dim,
                  "sliding_window": window, "softcap": softcap, "sinks": sinks, "scale": scale}  # fmt: skip
        derived.add("paged_attention", kind, params, i)
        derived.add("write_kv_cache", kind, {"num_kv_heads": kv_heads, "head_dim": head_dim,
                                             "value_dim": value_dim}, i)  # fmt: skip
        derived.pin("attention.layer", (kv_heads, heads // kv_heads, head_dim, value_dim, scale, window),
                    "paged_attention", "prefill_attention")  # fmt: skip
        derived.pin("kv.layer", (kv_heads, head_dim, value_dim), "write_kv_cache")
        derived.pin("attention.window", window, "paged_attention")
        derived.pin("attention.softcap", softcap)
    derived.add("layer_windows", "all", {"windows": sorted({w for w in windows if w})}, None)
    if softcap is None:
        derived.unused_clauses["SERVE-SOFTCAP"] = "no logit softcap"
    if not sinks:
        derived.unused_clauses["SERVE-SINKS"] = "no attention sinks"
    if all(u.params["head_dim"] == u.params["value_dim"] for u in derived.uses if u.op == "paged_attention"):
        derived.unused_clauses["SERVE-HEAD-DIMS"] = "value heads as wide as query/key heads"


def _rope(derived: Derived, config) -> None:
    """MODEL-ROPE: per layer type, ROPE-PARAMS' reader (theta, rotary dim, scaling), the style and
    mrope sections; the pins are (rotary_dim, head_dim, q heads, k heads)."""
    layer_types = list(_get(config, "layer_types", None) or [
        "sliding_attention" if w else "full_attention" for w in layer_windows(config)])  # fmt: skip
    per_type = _per_type_rope(config)
    interleaved = _get(config, "model_type") in INTERLEAVE_FLAG_TYPES and bool(
        _get(config, "rope_interleave")
    )
    section = (_get(config, "rope_parameters") or {}).get("mrope_section") if not per_type else None
    op = "mrope" if section else "rotary_embedding"
    for i, kind in enumerate(layer_types):
        d = rope_parameters(config, kind if per_type else None)
        if _get(config, "qk_rope_head_dim"):  # MLA: only the rope part of q/k rotates
            d = {
                **d,
                "head_dim": int(_get(config, "qk_rope_head_dim")),
                "rotary_dim": int(_get(config, "qk_rope_head_dim")),
            }
        layer = _layer(config, i)
        heads = int(_get(layer, "num_attention_heads"))
        kv_heads = int(_get(layer, "num_key_value_heads", heads))
        params = {"rope_type": d["rope_type"], "rope_theta": d["rope_theta"], "rotary_dim": d["rotary_dim"],
                  "head_dim": d["head_dim"], "is_neox_style": not interleaved}  # fmt: skip
        params.update({k: d[k] for k in ("factor", "original_max_position_embeddings") if k in d})
        if section:
            interleaved_sections = bool(
                (_get(config, "rope_parameters") or {}).get("mrope_interleaved", False)
            )
            params.update(mrope_section=list(section), mrope_interleaved=interleaved_sections)
            derived.pin("rope.mrope", (d["rotary_dim"], d["head_dim"], heads, kv_heads, tuple(section),
                                       interleaved_sections), "mrope")  # fmt: skip
        derived.add(op, kind, params, i)
        derived.pin("rope.layer", (d["rotary_dim"], d["head_dim"], heads, kv_heads), "rotary_embedding")
    derived.rope_styles = (not interleaved,)
    if all(u.params["rotary_dim"] == u.params["head_dim"] for u in derived.uses if u.op == op):
        derived.unused_clauses["ROPE-PARTIAL"] = "every layer rotates the whole head"


def _activation(derived: Derived, config, moe_layers: set[int]) -> None:
    """MODEL-ACT: the gated activation per layer, and its clamp limit per layer (ACT-LIMIT-CONFIG's
    reader) for Step-3.5's SwiGLU-step."""
    model_type = _get(config, "model_type")
    layers = int(_get(config, "num_hidden_layers"))
    if model_type == "step3p5":
        # MODEL-STEP3P5: a profile without the checkpoint's limit lists pins no limit (drawn).
        known = _get(config, "swiglu_limits") is not None or _get(config, "swiglu_limits_shared") is not None
        for i in range(layers):
            for shared in (False, True) if i in moe_layers else (False,):
                limit = swiglu_limit(config, i, shared=shared) if known else UNSOURCED
                kind = ("moe-shared" if shared else "moe-routed") if i in moe_layers else "dense"
                derived.add("swiglu_step_and_mul", kind, {"limit": limit}, i)
                if known:
                    derived.pin("activation.limit", limit, "swiglu_step_and_mul")
        derived.add("swiglu_limit", "all", {}, None)
        return
    if model_type == "gpt_oss":  # inside the experts: fused_moe's activation (MODEL-GPT-OSS)
        params = {"alpha": 1.702, "limit": float(_get(config, "swiglu_limit")), "interleaved": True}
        for i in range(layers):
            derived.add("swiglu_oai_and_mul", "moe", params, i)
        for key in ("alpha", "limit", "interleaved"):
            derived.pin(f"activation.oai_{key}", params[key], "swiglu_oai_and_mul")
        return
    act = _get(config, "hidden_activation") or _get(config, "hidden_act")
    op, params = GATED_ACTS[act]
    for i in range(layers):
        derived.add(op, "moe" if i in moe_layers else "dense", params, i)


def _norm(derived: Derived, config) -> None:
    """MODEL-NORM: the norm kind (plain or Gemma's 1 + w) and eps, with the fused residual add."""
    gemma = _get(config, "model_type") in GEMMA_NORM_TYPES
    eps = float(_get(config, "rms_norm_eps"))
    layers = tuple(range(int(_get(config, "num_hidden_layers"))))
    ops = ("gemma_rms_norm", "gemma_fused_add_rms_norm") if gemma else ("rms_norm", "fused_add_rms_norm")
    for op in ops:
        for i in layers:
            derived.add(op, "all", {"eps": eps}, i)
    derived.pin("norm.eps", eps, *ops)


def moe_layer_indices(config) -> set[int]:
    """MODEL-MOE: the layers whose MLP is the routed experts."""
    model_type, layers = _get(config, "model_type"), int(_get(config, "num_hidden_layers"))
    if model_type not in MOE_MODEL_TYPES:
        return set()
    if _get(config, "mlp_layer_types"):
        return {i for i, kind in enumerate(config.mlp_layer_types) if kind == "sparse"}
    first = int(_get(config, "first_k_dense_replace", 0))
    skipped = set(_get(config, "mlp_only_layers", ()) or ())
    step = int(_get(config, "decoder_sparse_step", 1))
    return {i for i in range(first, layers) if i not in skipped and (i + 1) % step == 0}


def _moe(derived: Derived, config, moe_layers: set[int]) -> None:
    """MODEL-MOE: select_experts with MOE-CONFIG's reader's keywords, the expert count (the fused
    expert computation and the shared slots: ``conformance.models.families``)."""
    if not moe_layers:
        return
    routing = moe_router_config(config)
    experts = int(
        _get(config, "n_routed_experts") or _get(config, "num_local_experts") or _get(config, "num_experts")
    )
    params = {"num_experts": experts, **routing}
    for i in sorted(moe_layers):
        derived.add("select_experts", "moe", params, i)
    derived.add("moe_router_config", "all", {}, None)
    derived.pin("moe.routing", (experts, routing["top_k"], routing["num_groups"], routing["topk_group"],
                                routing["scoring"], routing["renormalize"]), "select_experts")  # fmt: skip


def derive(config, *, name: str, title: str = "") -> Derived:
    """MODEL-PROFILE: the ops of a decoder config's layers with their fixed parameters (``name``
    labels the result: a built-in profile's name, or the config file's model_type); the rest of
    each family's ops: ``conformance.models.families.derive``."""
    derived = Derived(name=name, title=title or name)
    moe_layers = moe_layer_indices(config)
    _attention(derived, config)
    _rope(derived, config)
    _norm(derived, config)
    _activation(derived, config, moe_layers)
    _moe(derived, config, moe_layers)
    return derived


def scheduler_uses(derived: Derived, scheduler_config: dict) -> None:
    """MODEL-SANA: the DPM-Solver++ step with the scheduler configuration's fields that define it."""
    keys = (
        "num_train_timesteps",
        "beta_schedule",
        "solver_order",
        "prediction_type",
        "algorithm_type",
        "solver_type",
        "lower_order_final",
        "euler_at_final",
        "use_flow_sigmas",
        "flow_shift",
        "final_sigmas_type",
        "timestep_spacing",
    )  # fmt: skip (the keys DPM-CONFIG's draws give)
    params = {k: scheduler_config[k] for k in keys if k in scheduler_config}
    derived.add("dpm_scheduler", "scheduler", params, None)
    derived.pin("scheduler.config", params, "dpm_scheduler")
    if params.get("algorithm_type") != "sde-dpmsolver++":
        derived.unused_clauses["DPM-SDE3"] = "an ODE solver (dpmsolver++)"


def jsonable(value: Any):
    """``value`` with tuples as lists (the results document and profile comparisons)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value

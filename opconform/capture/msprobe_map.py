"""msprobe API calls -> contract ops (spec/ascend.md, MSPROBE-MAP).

``MAPPINGS`` holds, per msprobe API name (``PREFIX.API`` as dump.json spells it), the API's
parameters (names and defaults, from its documented signature, so positional and keyword
arguments bind alike) and the function that turns the bound arguments and the outputs into a
``Mapped`` call of a ``REPLAY_OPS`` op: the op's inputs by the row's names, its options, and the
outputs the op's clause judges (an output the contract op has no counterpart for, such as
``npu_rms_norm``'s rstd, is not judged). A call whose arguments fall outside what the op models
(a float mask with a bias, dropout, an Ascend op's optional input it has no argument for) raises
``Unmapped`` with the reason: it is listed, never judged. Every API not in ``MAPPINGS`` has no
contract op.
"""

from __future__ import annotations

import torch

from opconform.capture.msprobe_binding import REQUIRED, Mapped, Mapping, Unmapped, bind, tensor_arg
from opconform.capture.msprobe_map_attention import ATTENTION_MAPPINGS
from opconform.capture.msprobe_map_quant import QUANT_MAPPINGS

__all__ = ["MAPPINGS", "Mapped", "Unmapped", "map_call"]


def _last_dim(bound: dict, x: torch.Tensor, api: str) -> None:
    if bound["dim"] not in (-1, x.dim() - 1):
        raise Unmapped(f"{api}: dim={bound['dim']} splits another dim than the last (the contract op's)")


def _norm_weight(api: str, x: torch.Tensor, gamma: torch.Tensor) -> None:
    if gamma.dim() != 1:
        raise Unmapped(
            f"{api}: gamma of {gamma.dim()} dims normalizes several dims; the contract op the last"
        )


def _npu_rms_norm(bound: dict, outputs: list) -> Mapped:
    x, gamma = tensor_arg(bound, "self", "npu_rms_norm"), tensor_arg(bound, "gamma", "npu_rms_norm")
    _norm_weight("npu_rms_norm", x, gamma)
    return Mapped("rms_norm", {"x": x, "weight": gamma}, {"eps": bound["epsilon"]}, outputs[:1])


def _npu_add_rms_norm(bound: dict, outputs: list) -> Mapped:
    x1, x2, gamma = (tensor_arg(bound, n, "npu_add_rms_norm") for n in ("x1", "x2", "gamma"))
    _norm_weight("npu_add_rms_norm", x1, gamma)
    if len(outputs) != 3:
        raise Unmapped(f"npu_add_rms_norm: {len(outputs)} outputs recorded, the op returns (y, rstd, x)")
    inputs = {"x": x1, "residual": x2, "weight": gamma}
    return Mapped("fused_add_rms_norm", inputs, {"eps": bound["epsilon"]}, [outputs[0], outputs[2]])


def _npu_swiglu(bound: dict, outputs: list) -> Mapped:
    x = tensor_arg(bound, "x", "npu_swiglu")
    _last_dim(bound, x, "npu_swiglu")
    return Mapped("silu_and_mul", {"x": x}, {}, outputs[:1])


def _npu_geglu(bound: dict, outputs: list) -> Mapped:
    x = tensor_arg(bound, "x", "npu_geglu")
    _last_dim(bound, x, "npu_geglu")
    modes = {0: "none", 1: "tanh"}
    if bound["approximate"] not in modes:
        raise Unmapped(f"npu_geglu: approximate={bound['approximate']!r} is neither 0 (erf) nor 1 (tanh)")
    if not bound["activate_left"]:  # y = left * gelu(right): gelu_and_mul gates its first half
        d = x.shape[-1] // 2
        x = torch.cat([x[..., d:], x[..., :d]], dim=-1)
    return Mapped("gelu_and_mul", {"x": x}, {"approximate": modes[bound["approximate"]]}, outputs[:1])


def _npu_moe_gating_top_k_softmax(bound: dict, outputs: list) -> Mapped:
    x = tensor_arg(bound, "x", "npu_moe_gating_top_k_softmax")
    if bound["finished"] is not None:
        raise Unmapped("npu_moe_gating_top_k_softmax: finished rows get expert id E; select_experts has none")
    options = {
        "top_k": bound["k"], "scoring": "softmax", "renormalize": False, "correction_bias": None,
        "num_groups": 1, "topk_group": 1, "group_score": "max", "routed_scaling_factor": 1.0,
    }  # fmt: skip
    return Mapped("select_experts", {"router_logits": x}, options, outputs[:2])


def _npu_mrope(bound: dict, outputs: list) -> Mapped:
    api = "npu_mrope"
    positions, query, key, cache = (
        tensor_arg(bound, n, api) for n in ("positions", "query", "key", "cos_sin_cache")
    )
    styles = ROTARY_STYLES
    if bound["rotary_mode"] not in styles or bound["cache_mode"] != "default":
        raise Unmapped(f"{api}: rotary_mode={bound['rotary_mode']!r}, cache_mode={bound['cache_mode']!r}: "
                       "mapped are 'half'/'interleave' with the default cache layout")  # fmt: skip
    size = bound["head_size"]
    if not isinstance(size, int) or size <= 0 or query.shape[-1] % size or key.shape[-1] % size:
        raise Unmapped(f"{api}: head_size {size!r} does not divide query and key's widths")
    heads = [t.reshape(t.shape[0], -1, size) for t in (query, key, *outputs[:2])]  # [T, H * D] -> [T, H, D]
    inputs = {"positions": positions, "query": heads[0], "key": heads[1], "cos_sin_cache": cache}
    options = {"is_neox_style": styles[bound["rotary_mode"]]}
    section = bound["mrope_section"]
    if section is None or list(section) == [0, 0, 0]:  # plain rope over positions [T]
        return Mapped("rotary_embedding", inputs, options, heads[2:])
    options |= {"mrope_section": list(section), "mrope_interleaved": False}  # contiguous t/h/w bands
    return Mapped("mrope", inputs, options, heads[2:])


ROTARY_STYLES = {"half": True, "interleave": False}  # torch_npu's rotary_mode -> is_neox_style


def _cos_sin_rows(cos: torch.Tensor, sin: torch.Tensor, mode: str, api: str) -> torch.Tensor:
    """Full-width cos/sin rows [R, D] as the contract's cache rows cat(cos, sin) [R, D]: "half" repeats
    each half (cat(c, c)), "interleave" each element (CANN-ROTARY-MUL); other tables are outside."""
    half = cos.shape[-1] // 2
    pick = (
        (lambda t: (t[..., :half], t[..., half:]))
        if mode == "half"
        else (lambda t: (t[..., 0::2], t[..., 1::2]))
    )
    for name, table in (("cos", cos), ("sin", sin)):
        first, second = pick(table)
        if not torch.equal(first, second):
            raise Unmapped(f"{api}: its {name} table is not one angle per rotated pair ({mode} mode): "
                           "the contract's rope has none other")  # fmt: skip
    return torch.cat([pick(cos)[0], pick(sin)[0]], dim=-1)


def _npu_rotary_mul(bound: dict, outputs: list) -> Mapped:
    api = "npu_rotary_mul"
    x, r1, r2 = (tensor_arg(bound, n, api) for n in ("input", "r1", "r2"))
    if bound["rotary_mode"] not in ROTARY_STYLES or x.dim() != 4:
        raise Unmapped(
            f"{api}: rotary_mode {bound['rotary_mode']!r}, {x.dim()}-d input: mapped are 4-d half/interleave"
        )
    width = x.shape[-1]
    try:  # every row of D elements is rotated by its own broadcast cos/sin row: one token each
        r1, r2 = (t.broadcast_to(x.shape).reshape(-1, width) for t in (r1, r2))
    except RuntimeError:
        raise Unmapped(
            f"{api}: r1 {tuple(r1.shape)} does not broadcast to the input {tuple(x.shape)}"
        ) from None
    cache = _cos_sin_rows(r1, r2, bound["rotary_mode"], api)
    rows, out = x.reshape(-1, 1, width), outputs[0].reshape(-1, 1, width) if outputs else None
    inputs = {"positions": torch.arange(rows.shape[0]), "query": rows, "key": rows, "cos_sin_cache": cache}
    options = {"is_neox_style": ROTARY_STYLES[bound["rotary_mode"]]}
    return Mapped("rotary_embedding", inputs, options, [out, out])  # the one input as query and as key


APPLY_ROPE_HEADS = {1: 2, 2: 2, 3: 1, 4: 1}  # layout code (BSND, SBND, BNSD, TND) -> its heads' dim


def _npu_apply_rotary_pos_emb(bound: dict, outputs: list) -> Mapped:
    api = "npu_apply_rotary_pos_emb"
    q, k, cos, sin = (tensor_arg(bound, n, api) for n in ("query", "key", "cos", "sin"))
    layout, mode = bound["layout"], bound["rotary_mode"]
    if layout not in APPLY_ROPE_HEADS or mode not in ROTARY_STYLES or q.dim() != (3 if layout == 4 else 4):
        raise Unmapped(f"{api}: layout {layout!r}, rotary_mode {mode!r}, {q.dim()}-d query")
    heads = APPLY_ROPE_HEADS[layout]

    def per_token(t):  # [..., N, D] with every other dim a token: [T, N, D]
        moved = t.movedim(heads, -2)
        return moved.reshape(-1, *moved.shape[-2:])

    one_head = (*q.shape[:heads], 1, *q.shape[heads + 1 :])
    try:
        tables = [per_token(t.broadcast_to(one_head))[:, 0] for t in (cos, sin)]
    except RuntimeError:
        raise Unmapped(
            f"{api}: cos {tuple(cos.shape)} is not one table per token of {tuple(q.shape)}"
        ) from None
    query, key = per_token(q), per_token(k)
    if key.shape[0] != query.shape[0] or len(outputs) < 2:
        raise Unmapped(f"{api}: key {tuple(k.shape)} has other tokens than query {tuple(q.shape)}")
    inputs = {"positions": torch.arange(query.shape[0]), "query": query, "key": key,
              "cos_sin_cache": _cos_sin_rows(*tables, mode, api)}  # fmt: skip
    return Mapped(
        "rotary_embedding",
        inputs,
        {"is_neox_style": ROTARY_STYLES[mode]},
        [per_token(o) for o in outputs[:2]],
    )


def _gelu(bound: dict, outputs: list) -> Mapped:
    x = tensor_arg(bound, "input", "gelu")
    if bound["approximate"] != "tanh":
        raise Unmapped(f"gelu: approximate={bound['approximate']!r}: only the tanh GELU: new_gelu")
    return Mapped("new_gelu", {"x": x}, {}, outputs[:1])


def _rms_norm(bound: dict, outputs: list) -> Mapped:
    x = tensor_arg(bound, "input", "rms_norm")
    shape, weight = bound["normalized_shape"], bound["weight"]
    if weight is None or len(shape) != 1:
        given = "None" if weight is None else "given"
        raise Unmapped(f"rms_norm: normalized_shape {list(shape)}, weight {given}; "
                       "the contract op normalizes the last dim with a weight")  # fmt: skip
    if bound["eps"] is None:  # torch's default is documented per version; the dump names none
        raise Unmapped(
            "rms_norm: eps=None: torch's default eps differs between versions (the input dtype's "
            "machine epsilon, now its opmath type's) and the dump does not say which torch ran"
        )
    return Mapped("rms_norm", {"x": x, "weight": weight}, {"eps": bound["eps"]}, outputs[:1])


_NORM, _MAP = "spec/ascend.md, CANN-RMS-NORM", "spec/ascend.md, MSPROBE-MAP"
MAPPINGS: dict[str, Mapping] = {
    "NPU.npu_rms_norm": Mapping(
        (("self", REQUIRED), ("gamma", REQUIRED), ("epsilon", 1e-6)), _npu_rms_norm, _NORM
    ),
    "NPU.npu_add_rms_norm": Mapping(
        (("x1", REQUIRED), ("x2", REQUIRED), ("gamma", REQUIRED), ("epsilon", 1e-6)), _npu_add_rms_norm, _NORM
    ),
    "NPU.npu_swiglu": Mapping((("x", REQUIRED), ("dim", -1)), _npu_swiglu, "spec/ascend.md, CANN-SWIGLU"),
    "NPU.npu_geglu": Mapping(
        (("x", REQUIRED), ("dim", -1), ("approximate", 1), ("activate_left", False)),
        _npu_geglu,
        "spec/ascend.md, CANN-GEGLU",
    ),  # fmt: skip
    "NPU.npu_moe_gating_top_k_softmax": Mapping(
        (("x", REQUIRED), ("finished", None), ("k", 1)),
        _npu_moe_gating_top_k_softmax,
        "spec/ascend.md, CANN-MOE-GATING-TOPK-SOFTMAX",
    ),  # fmt: skip
    "NPU.npu_mrope": Mapping(
        (
            ("positions", REQUIRED),
            ("query", REQUIRED),
            ("key", REQUIRED),
            ("cos_sin_cache", REQUIRED),
            ("head_size", REQUIRED),
            ("mrope_section", None),
            ("rotary_mode", "half"),
            ("cache_mode", "default"),
        ),
        _npu_mrope,
        "spec/ascend.md, CANN-MROPE",
    ),  # fmt: skip
    "NPU.npu_rotary_mul": Mapping(
        (("input", REQUIRED), ("r1", REQUIRED), ("r2", REQUIRED), ("rotary_mode", "half")),
        _npu_rotary_mul,
        "spec/ascend.md, CANN-ROTARY-MUL",
    ),  # fmt: skip
    "NPU.npu_apply_rotary_pos_emb": Mapping(
        (
            ("query", REQUIRED),
            ("key", REQUIRED),
            ("cos", REQUIRED),
            ("sin", REQUIRED),
            ("layout", 1),
            ("rotary_mode", "half"),
        ),
        _npu_apply_rotary_pos_emb,
        "spec/ascend.md, CANN-APPLY-ROPE",
    ),  # fmt: skip
    **ATTENTION_MAPPINGS,
    **QUANT_MAPPINGS,
    "Functional.gelu": Mapping((("input", REQUIRED), ("approximate", "none")), _gelu, _MAP),
    "Functional.rms_norm": Mapping(
        (("input", REQUIRED), ("normalized_shape", REQUIRED), ("weight", None), ("eps", None)),
        _rms_norm,
        _MAP,
    ),  # fmt: skip
}


def map_call(api: str, args: list, kwargs: dict, outputs: list) -> Mapped:
    """The contract op call of one decoded msprobe call of a mapped ``api``; Unmapped when outside it."""
    mapping = MAPPINGS[api]
    from opconform.capture.ops import REPLAY_OPS

    mapped = mapping.build(bind(api, mapping, args, kwargs), outputs)
    wanted = REPLAY_OPS[mapped.op].outputs
    if len(mapped.outputs) != len(wanted) or not all(isinstance(t, torch.Tensor) for t in mapped.outputs):
        raise Unmapped(
            f"{api}: the outputs {mapped.op} is judged on ({', '.join(wanted)}) were not all recorded"
        )
    return mapped

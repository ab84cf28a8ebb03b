"""The rope family's range rules (spec/rope.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, around, config_forms, dim, has, odd, past


def _max_position(arguments: dict):
    positions = arguments.get("positions")
    return int(positions.max()) if getattr(positions, "numel", lambda: 0)() else None


def _sections(arguments: dict):
    """ROPE-MROPE's layout and whether its three sections are equal."""
    section = arguments.get("mrope_section")
    if section is None:
        return None
    layout = "interleaved" if arguments.get("mrope_interleaved") else "sections"
    return f"{layout}, {'equal' if len(set(section)) == 1 else 'unequal'}"


def _switch_offset(rope_type: str):
    """seq_len - T for ``rope_type``'s switch T (conformance.strategies.rope.switch_length)."""

    def of(arguments: dict):
        from reference.rope_config import rope_parameters

        seq_len = arguments.get("seq_len")
        try:
            d = rope_parameters(arguments["config"], arguments.get("layer_type"))
        except (KeyError, ValueError):
            return None
        if d["rope_type"] != rope_type or seq_len is None:
            return None
        key = "original_max_position_embeddings" if rope_type == "longrope" else "max_position_embeddings"
        return seq_len - d[key]

    return of


def _stale_keys(arguments: dict):
    """Rule 5: a "default" rope dict carrying a scaled type's keys (factor, mscale_all_dim)."""
    from reference.rope_config import rope_parameters

    try:
        d = rope_parameters(arguments["config"], arguments.get("layer_type"))
    except (KeyError, ValueError):
        return None
    if d["rope_type"] == "default" and {"factor", "mscale_all_dim"} <= set(d):
        return "default type with scaling keys"
    if d["rope_type"] == "yarn" and not {"beta_fast", "beta_slow", "mscale", "mscale_all_dim"} & set(d):
        return "yarn without its optional keys"
    return None


TOKENS = Measure("rotary_embedding", "tokens", dim("query", 0))
HEADS = Measure("rotary_embedding", "query heads", dim("query", 1))
HEAD_DIM = Measure("rotary_embedding", "head_dim", dim("query", 2))
ROTARY = Measure("rotary_embedding", "rotary_dim", dim("cos_sin_cache", 1))
POSITIONS = Measure("rotary_embedding", "largest position", _max_position)
MROPE_TOKENS = Measure("mrope", "tokens", dim("query", 0))
MROPE_SECTIONS = Measure("mrope", "sections", _sections)
COS_SIN_POSITIONS = Measure("rope_cos_sin", "largest position", _max_position)
FREQUENCIES = Measure("rope_cos_sin", "frequencies", dim("inv_freq", 0))
DYNAMIC = Measure("rope_inv_freq", "seq_len - max_position_embeddings (dynamic)", _switch_offset("dynamic"))
LONGROPE = Measure("rope_inv_freq", "seq_len - original_max_position_embeddings (longrope)",
                   _switch_offset("longrope"))  # fmt: skip
INV_FREQ_FORMS = Measure("rope_inv_freq", "config form", _stale_keys)
SCALE_FORMS = Measure("rope_softmax_scale", "config form", _stale_keys)

TILES = "token tiles of 16 to 256 (Triton rope kernels); positions past them"
RULES = [
    past(TOKENS, 256, TILES),
    odd(TOKENS),
    odd(HEADS),
    past(POSITIONS, 256, TILES),
    past(ROTARY, 128, "flash-attn's rotary kernel: BLOCK_K 32, 64, 128, 256 by rotary_dim"),
    has(ROTARY, 96, why="Phi-3-mini's rotary width, inside a 128-wide tile"),
    has(HEAD_DIM, 80, 96, why="Phi-2's and Phi-3's head dims"),
    past(HEAD_DIM, 128, "flash-attn's rotary kernel: head dims to 256"),
    past(MROPE_TOKENS, 64, TILES),
    has(MROPE_SECTIONS, "interleaved, unequal", "sections, unequal",
        why="Qwen3-VL's [24, 20, 20] and Qwen2-VL's [16, 24, 24]"),  # fmt: skip
    past(COS_SIN_POSITIONS, 256, TILES),
    past(FREQUENCIES, 64, "rotary_dim past 128: flash-attn's 256-wide tile"),
    has(FREQUENCIES, 48, why="Phi-3-mini's rotary width 96"),
    around(DYNAMIC, "ROPE-FREQ-DYNAMIC's switch at max_position_embeddings"),
    around(LONGROPE, "ROPE-FREQ-LONGROPE's switch at original_max_position_embeddings"),
    config_forms(INV_FREQ_FORMS, "default type with scaling keys", "yarn without its optional keys",
                 why="scaling keys without a scaled type (ignored); yarn's keys left to defaults"),
    config_forms(SCALE_FORMS, "default type with scaling keys",
                 why="ROPE-SOFTMAX-SCALE: mscale_all_dim without a scaled type leaves the scale"),
]  # fmt: skip

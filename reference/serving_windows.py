"""Oracles of spec/serving.md's window clauses: which layers slide (SERVE-LAYER-WINDOWS) and how
many keys a kernel's raw window arguments keep (SERVE-WINDOW-ARGS). Config parsing and integer
arithmetic only, no tensors; ``reference.serving`` re-exports all three functions.
"""

from __future__ import annotations

from reference.masks import require_window

__all__ = ["layer_windows", "window_kernel_args", "window_keys"]

FIA_MAX_TOKENS = 2147483647


def window_keys(args: dict) -> int | None:
    """SERVE-WINDOW-ARGS: the number of keys a kernel's raw window arguments keep (None = unbounded).

    ``args`` holds exactly one of the table's window arguments (``next_tokens`` may accompany
    ``pre_tokens`` and must be 0)."""
    if not isinstance(args, dict):
        raise ValueError(f"window arguments must be a dict, got {args!r}")
    known = {"sliding_window", "window_size", "window_left", "pre_tokens", "left_context"}
    present = sorted(set(args) & known)
    extra = sorted(set(args) - known - {"next_tokens"})
    if len(present) != 1 or extra:
        raise ValueError(f"window arguments must hold exactly one of {sorted(known)}, got {sorted(args)}")
    name = present[0]
    value = args[name]
    if name == "window_size":
        left, right = value
        if right != 0:
            raise ValueError(f"window_size must be (left, 0) for causal attention, got {value!r}")
        return None if left == -1 else left + 1
    if name == "window_left":
        return None if value == -1 else value + 1
    if name == "pre_tokens":
        if args.get("next_tokens", 0) != 0:
            raise ValueError(f"next_tokens must be 0 beside pre_tokens, got {args['next_tokens']!r}")
        return None if value >= FIA_MAX_TOKENS else value + 1
    return value  # sliding_window, left_context: the value itself, None unbounded


def window_kernel_args(sliding_window: int | None) -> dict:
    """SERVE-WINDOW-ARGS in the contract's own terms: both kernels get the canonical window W.

    A backend returns its kernels' raw arguments instead; the property translates each side with
    ``window_keys`` and requires W keys on both."""
    sliding_window = require_window(sliding_window)
    return {"prefill": {"sliding_window": sliding_window}, "decode": {"sliding_window": sliding_window}}


# SERVE-LAYER-WINDOWS: the legacy rule of each model type whose transformers config fills
# ``layer_types`` itself when a config has none; (rule, field, default of the field). Every
# other model type with a window slides every layer.
_LEGACY_RULES = {
    "gemma2": ("even", None, None),
    "gpt_oss": ("even", None, None),
    "gemma3": ("pattern", "sliding_window_pattern", 6),
    "gemma3_text": ("pattern", "sliding_window_pattern", 6),
    "cohere2": ("pattern", "sliding_window_pattern", 4),
    "qwen2": ("from", "max_window_layers", 28),
    "qwen3": ("from", "max_window_layers", 28),
    "qwen2_moe": ("even_below", "max_window_layers", 28),
}


def _legacy_sliding(config, layers: int) -> list[bool]:
    """SERVE-LAYER-WINDOWS without ``layer_types``: which layers the model type's rule slides."""
    rule, field, default = _LEGACY_RULES.get(getattr(config, "model_type", None), ("all", None, None))
    value = default if field is None else getattr(config, field, default)
    lowest = 1 if rule == "pattern" else 0
    if field is not None and (isinstance(value, bool) or not isinstance(value, int) or value < lowest):
        raise ValueError(f"config.{field} must be an int >= {lowest}, got {value!r}")
    decide = {
        "all": lambda i: True,
        "even": lambda i: i % 2 == 0,
        "pattern": lambda i: (i + 1) % value != 0,
        "from": lambda i: i >= value,
        "even_below": lambda i: i % 2 == 0 and i < value,
    }[rule]
    return [decide(i) for i in range(layers)]


def validate_layer_config(config) -> tuple[int, int | None, list[str] | None]:
    """SERVE-LAYER-WINDOWS' config fields, checked: (num_hidden_layers, sliding_window as given,
    layer_types as a list or None). ValueError naming the field."""
    layers = getattr(config, "num_hidden_layers", None)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"config.num_hidden_layers must be an int >= 1, got {layers!r}")
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        layer_types = list(layer_types)
        if len(layer_types) != layers:
            raise ValueError(f"config.layer_types must have {layers} entries, got {len(layer_types)}")
        unknown = sorted(set(layer_types) - {"sliding_attention", "full_attention"})
        if unknown:
            raise ValueError(f"config.layer_types has unknown entries {unknown}")
    return layers, getattr(config, "sliding_window", None), layer_types


def layer_windows(config) -> list[int | None]:
    """SERVE-LAYER-WINDOWS: per layer, config.sliding_window for a sliding layer, None for a full one."""
    layers, window, layer_types = validate_layer_config(config)
    if layer_types is not None:
        sliding = [kind == "sliding_attention" for kind in layer_types]
    elif window is None or getattr(config, "use_sliding_window", True) is False:
        sliding = [False] * layers
    else:
        sliding = _legacy_sliding(config, layers)
    if any(sliding):
        require_window(window, "config.sliding_window", optional=False)
    return [window if s else None for s in sliding]

"""Oracles of the serving window clauses: which layers slide (SERVE-LAYER-WINDOWS) and how
many keys a kernel's raw window arguments keep (SERVE-WINDOW-ARGS). Config parsing and integer
arithmetic only, no tensors; ``reference.serving`` re-exports ``layer_windows``,
``window_kernel_args`` and ``window_keys``.
"""

from __future__ import annotations

from reference.masks import CANN_MAX_TOKENS, require_window

__all__ = ["known_window_api", "layer_windows", "use_sliding_window", "window_kernel_args", "window_keys"]

# SERVE-WINDOW-ARGS: each API's window arguments, as a group of keys a dict may hold.
_ARGUMENT_GROUPS = {
    "sliding_window": {"sliding_window"},
    "window_size": {"window_size"},
    "window_left": {"window_left"},
    "left_context": {"left_context"},
    "fia": {"pre_tokens", "next_tokens", "sparse_mode"},
}


def known_window_api(args) -> bool:
    """SERVE-WINDOW-ARGS: whether ``args`` uses an API of the table (a dict holding one of its
    argument names); an API it does not know is not judged."""
    known = set().union(*_ARGUMENT_GROUPS.values())
    return not isinstance(args, dict) or bool(known & set(args))


def _flash_attention_keys(value) -> int | None:
    """SERVE-WINDOW-ARGS, FlashAttention ``window_size=(left, right)`` under its causal flag:
    (-1, -1) and (-1, 0) are no window (WINDOW-CONV's sources), (left, 0) keeps left + 1 keys."""
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(_is_int(v) for v in value):
        raise ValueError(f"window_size must be a pair of ints (left, right), got {value!r}")
    left, right = value
    if tuple(value) == (-1, -1) or (left == -1 and right == 0):
        return None
    if right != 0 or left < 0:
        raise ValueError(
            f"window_size must be (left >= 0, 0), (-1, 0) or (-1, -1) for causal attention, got {value!r}"
        )
    return left + 1


def _fia_keys(args: dict) -> int | None:
    """SERVE-WINDOW-ARGS, Ascend FIA's prompt kernel (CANN-FIA-SPARSE): sparse_mode 3
    is bottom-right causal and ignores pre/next tokens (no window); 4, or no sparse_mode beside
    pre_tokens, is the band, pre_tokens + 1 keys with next_tokens = 0 (pre_tokens 2147483647: none)."""
    mode = args.get("sparse_mode", 4)
    if mode == 3:
        return None
    if mode != 4:
        raise ValueError(f"sparse_mode must be 3 (causal) or 4 (band) for causal attention, got {mode!r}")
    if "pre_tokens" not in args:
        raise ValueError(f"pre_tokens must be given with sparse_mode 4, got {sorted(args)}")
    pre_tokens, next_tokens = args["pre_tokens"], args.get("next_tokens", 0)
    if not _is_int(pre_tokens) or pre_tokens < 0:
        raise ValueError(f"pre_tokens must be an int >= 0, got {pre_tokens!r}")
    if next_tokens != 0:
        raise ValueError(f"next_tokens must be 0 beside pre_tokens in the band, got {next_tokens!r}")
    return None if pre_tokens >= CANN_MAX_TOKENS else pre_tokens + 1


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def window_keys(args: dict) -> int | None:
    """SERVE-WINDOW-ARGS: the number of keys a kernel's raw window arguments keep (None = unbounded).

    ``args`` holds one API's window arguments: ``sliding_window``, ``window_size``,
    ``window_left``, ``left_context``, or FIA's ``pre_tokens`` / ``next_tokens`` /
    ``sparse_mode``. Each API's documented "no window" spelling is unbounded."""
    if not isinstance(args, dict):
        raise ValueError(f"window arguments must be a dict, got {args!r}")
    groups = [name for name, keys in _ARGUMENT_GROUPS.items() if keys & set(args)]
    known = set().union(*_ARGUMENT_GROUPS.values())
    if len(groups) != 1 or set(args) - known:
        raise ValueError(f"window arguments must be one API's of {sorted(known)}, got {sorted(args)}")
    group = groups[0]
    if group == "fia":
        return _fia_keys(args)
    value = args[group]
    if group == "window_size":
        return _flash_attention_keys(value)
    if group == "window_left":
        return None if value == -1 else value + 1
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


# SERVE-LAYER-WINDOWS: the model types whose transformers config has a ``use_sliding_window`` switch,
# each defaulting it to False (Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig). Every
# other model type has no such field: its window is on unless a config says otherwise.
_SWITCH_DEFAULTS_OFF = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})


def use_sliding_window(config) -> bool:
    """SERVE-LAYER-WINDOWS: whether ``config.sliding_window`` is used at all: ``use_sliding_window``
    when the config has it (read as transformers and vLLM read it, by truth value), else that
    model type's transformers default."""
    default = getattr(config, "model_type", None) not in _SWITCH_DEFAULTS_OFF
    return bool(getattr(config, "use_sliding_window", default))


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
    elif window is None or not use_sliding_window(config):
        sliding = [False] * layers
    else:
        sliding = _legacy_sliding(config, layers)
    if any(sliding):
        require_window(window, "config.sliding_window", optional=False)
    return [window if s else None for s in sliding]


def accepted_layer_windows(config, windows: list[int | None]) -> list[list[int | None]]:
    """SERVE-LAYER-WINDOWS: the per-layer window lists a backend may return for ``config`` whose
    contract windows are ``windows``: those, and for a Cohere2 config also every sliding layer's
    window plus one (vLLM 0.33's ``commandr.py`` passes ``config.sliding_window + 1``, the W + 1 keys
    its comment calls Cohere's training convention; transformers' ``Cohere2Attention`` keeps W)."""
    if getattr(config, "model_type", None) != "cohere2" or all(w is None for w in windows):
        return [windows]
    return [windows, [None if w is None else w + 1 for w in windows]]

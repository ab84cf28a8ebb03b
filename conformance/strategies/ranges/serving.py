"""The serving family's range rules (spec/serving.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, around, config_forms, dim, has, odd, offsets, past

PARTITION = 512  # vLLM's paged attention v2 partition (SERVE-LONG)


def _lengths(arguments: dict) -> list[int]:
    seq_lens = arguments.get("seq_lens")
    return [] if seq_lens is None else [int(n) for n in seq_lens.tolist()]


def _queries(arguments: dict):
    """Each sequence's query rows (cu_seqlens_q's differences)."""
    cu = arguments.get("cu_seqlens_q")
    return None if cu is None else [int(b - a) for a, b in zip(cu.tolist(), cu.tolist()[1:], strict=False)]


def _partition_edges(arguments: dict):
    """L - m * 512 for each sequence length L within one key of a multiple m >= 1 of the partition."""
    return [n - round(n / PARTITION) * PARTITION for n in _lengths(arguments)
            if n >= PARTITION - 1 and abs(n - round(n / PARTITION) * PARTITION) <= 1]  # fmt: skip


def _window_edge(arguments: dict):
    """L - W for each sequence length L of a call with window W (SERVE-WINDOW's edge at L = W)."""
    window = arguments.get("sliding_window")
    return offsets(_lengths(arguments), window) if window is not None else None


def _group(arguments: dict):
    q, k = arguments.get("q"), arguments.get("k_cache")
    return int(q.shape[1]) // int(k.shape[-2]) if q is not None and k is not None else None


def _field(config, name: str):
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def _max_window_edge(arguments: dict):
    """Layer l - M for the layers around Qwen's max_window_layers M (layers below M full, from M on
    sliding, SERVE-LAYER-WINDOWS) that the config has, when its switch is on."""
    config = arguments.get("config")
    m, n = _field(config, "max_window_layers"), _field(config, "num_hidden_layers")
    if not (_field(config, "use_sliding_window") and isinstance(m, int) and isinstance(n, int)):
        return None
    return offsets(range(n), m)


def _window_config_form(arguments: dict):
    """Rule 5: Qwen's window keys without use_sliding_window on, and the switch without its keys."""
    config, forms = arguments.get("config"), []
    switch = _field(config, "use_sliding_window")
    if not switch and _field(config, "max_window_layers") is not None:
        forms.append("max_window_layers without use_sliding_window")
    if switch is False and _field(config, "sliding_window") is not None:
        forms.append("sliding_window with use_sliding_window off")
    if switch and _field(config, "max_window_layers") is None:
        forms.append("use_sliding_window without max_window_layers")
    return forms


KEYS = Measure("paged_attention", "sequence length", lambda a: max(_lengths(a), default=None))
QUERIES = Measure("paged_attention", "query rows of a sequence", _queries)
HEAD_DIM = Measure("paged_attention", "head_dim", dim("q", 2))
VALUE_DIM = Measure("paged_attention", "value head_dim", dim("v_cache", -1))
RULES = [
    past(KEYS, 2048, "split-KV: vLLM's 512-key partitions, FlashAttention's splits; past four"),
    odd(KEYS),
    past(QUERIES, 64, "FlashAttention's varlen kernels tile a sequence's queries by 64 or 128"),
    has(HEAD_DIM, 80, 96, 192, 576, why="Phi-2, Phi-3, MLA's 192 and the absorbed 576"),
    has(VALUE_DIM, 512, why="MLA's absorbed decode: Dv 512 beside Dqk 576"),
    odd(Measure("paged_attention", "GQA group", _group)),
    around(
        Measure("paged_attention", "length - multiple of 512", _partition_edges),
        "a sequence one key short of, at and one past a partition boundary",
    ),  # fmt: skip
    around(
        Measure("paged_attention", "length - window", _window_edge),
        "SERVE-WINDOW's edge: a window as long as the sequence",
    ),  # fmt: skip
    around(
        Measure("layer_windows", "layer - max_window_layers", _max_window_edge),
        "SERVE-LAYER-WINDOWS: Qwen's layers from max_window_layers on slide",
    ),  # fmt: skip
    config_forms(
        Measure("layer_windows", "config form", _window_config_form),
        "max_window_layers without use_sliding_window",
        "sliding_window with use_sliding_window off",
        "use_sliding_window without max_window_layers",
        why="SERVE-LAYER-WINDOWS' switch",
    ),  # fmt: skip
]

"""The attention family's range rules (spec/attention.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, around, dim, has, odd, offsets, past


def _group(arguments: dict):
    q, k = arguments.get("q"), arguments.get("k", arguments.get("k_cache"))
    return int(q.shape[1]) // int(k.shape[1]) if q is not None and k is not None else None


def _prefill_window_edge(arguments: dict):
    """W - S for a window W over a sequence of S keys (ATTN-WINDOW's edge at W = S)."""
    window, k = arguments.get("sliding_window"), arguments.get("k")
    return offsets([window], int(k.shape[2])) if window is not None else None


def _decode_window_edge(arguments: dict):
    """L - W for each sequence length L of a decode with window W."""
    window, lengths = arguments.get("sliding_window"), arguments.get("seq_lens")
    if window is None or lengths is None:
        return None
    return offsets(lengths.tolist(), window)


RULES = []
for op in ("attention", "prefill_attention"):
    length = Measure(op, "sequence length", dim("q", 2))
    head_dim = Measure(op, "head_dim", dim("q", 3))
    RULES += [
        past(length, 128, "FlashAttention's and FlexAttention's 128-row tiles"),
        odd(length),
        past(head_dim, 128, "FlashAttention's head-dim kernels to 256"),
        has(head_dim, 80, 96, why="head dims 80 (Phi-2) and 96 (Phi-3) inside a 128-wide tile"),
        odd(Measure(op, "GQA group", _group)),
    ]
DECODE_KEYS = Measure("decode_attention", "cache length", dim("k_cache", 2))
RULES += [
    past(DECODE_KEYS, 512, "split-KV decode: vLLM's 512-key partitions"),
    has(Measure("decode_attention", "head_dim", dim("q", 3)), 96, why="Phi-3's head dim 96 in a 128 tile"),
    around(
        Measure("prefill_attention", "window - sequence length", _prefill_window_edge),
        "ATTN-WINDOW's edge: a window as long as the sequence",
    ),  # fmt: skip
    around(
        Measure("decode_attention", "length - window", _decode_window_edge),
        "ATTN-DECODE's window edge: a window as long as the sequence",
    ),  # fmt: skip
]

"""The masks family's range rules (spec/masks.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, around, has, odd, offsets, past


def _value(name: str):
    return lambda arguments: arguments.get(name)


def _encoder_window_edge(arguments: dict):
    """W - S of an encoder mask with window W (MASK-ENC's edge at W = S)."""
    window = arguments.get("sliding_window")
    return offsets([window], arguments["seq_len"]) if window is not None else None


def _decode_window_edge(arguments: dict):
    """L - W for each sequence length L of the decode mask (MASK-SWA-DECODE's edge at L = W)."""
    return offsets(arguments["seq_lens"].tolist(), arguments["window"])


SEQ_LEN = Measure("encoder_attention_mask", "seq_len", _value("seq_len"))
KV_LEN = Measure("swa_decode_mask", "kv_len", _value("kv_len"))
CANN_WINDOW = Measure("cann_prefill_tokens", "window", _value("sliding_window"))
RULES = [
    past(SEQ_LEN, 256, "FlexAttention's 128-key block masks; tiles to 256"),
    odd(SEQ_LEN),
    past(KV_LEN, 256, "decode masks over many 128-key blocks"),
    odd(KV_LEN),
    around(
        Measure("encoder_attention_mask", "window - seq_len", _encoder_window_edge),
        "MASK-ENC's window edge at W = S",
    ),  # fmt: skip
    around(
        Measure("swa_decode_mask", "length - window", _decode_window_edge),
        "MASK-SWA-DECODE's window edge at L = W",
    ),  # fmt: skip
    has(CANN_WINDOW, 2047, 2048, 2049, kind=2, why="FIA's 2048 x 2048 compressed mask (spec/ascend.md)"),
]

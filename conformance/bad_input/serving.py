"""SERVE-ERRORS as records (spec/serving.md): every bad input the clause lists, shared by the oracle's
self-test (tests/test_reference_serving_errors.py) and the property (conformance/test_serving.py).

Each record starts from one valid call (two sequences, T = 3 new queries, four blocks of 2) and
breaks one argument; the message must name that argument (``conformance.bad_input.names``).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from conformance.bad_input import ErrorCase, names


def _ones(*shape, dtype=torch.float32):
    """A tensor of ones built on the device when the record is called."""
    return lambda d: torch.ones(*shape, dtype=dtype, device=d)


def _ints(values, dtype=torch.int64):
    """An integer (or other ``dtype``) tensor of ``values`` built on the device."""
    return lambda d: torch.tensor(values, dtype=dtype, device=d)


def paged_call(**overrides):
    """paged_attention on a valid batch (L = 3, 4; n = 1, 2; Hq 2, Hkv 1, D 16) with ``overrides``."""

    def build(d):
        cache = torch.randn(4, 2, 1, 16, device=d)
        call = {
            "q": torch.randn(3, 2, 16, device=d),
            "k_cache": cache,
            "v_cache": cache.clone(),
            "block_table": torch.tensor([[0, 1], [2, 3]], device=d),
            "cu_seqlens_q": torch.tensor([0, 1, 3], device=d),
            "seq_lens": torch.tensor([3, 4], device=d),
            "sliding_window": None,
            "softcap": None,
            "sinks": None,
            "scale": 0.25,
        }
        call.update({k: v(d) if callable(v) else v for k, v in overrides.items()})
        return (call.pop("q"), call.pop("k_cache"), call.pop("v_cache")), call

    return build


def _serve(name: str, argument: str | tuple, **overrides) -> ErrorCase:
    arguments = (argument,) if isinstance(argument, str) else argument
    return ErrorCase("SERVE-ERRORS", "paged_attention", name, paged_call(**overrides), ValueError,
                     names(*arguments))  # fmt: skip


def _config(**fields):
    return lambda d: ((SimpleNamespace(**fields),), {})


def _layers(name: str, argument: str, **fields) -> ErrorCase:
    match = names(f"config.{argument}", argument)
    return ErrorCase("SERVE-ERRORS", "layer_windows", name, _config(**fields), ValueError, match)


_BAD_NUMBERS = (("zero", 0.0), ("negative", -1.0), ("inf", float("inf")), ("nan", float("nan")))
_FULL = "full_attention"

ERRORS = [
    _serve("q-2d", "q", q=_ones(3, 32)),
    _serve("q-integer", "q", q=_ones(3, 2, 16, dtype=torch.int64)),
    _serve("q-empty", "q", q=_ones(0, 2, 16)),
    _serve("k-cache-3d", "k_cache", k_cache=_ones(4, 2, 16)),
    _serve("k-cache-integer", "k_cache", k_cache=_ones(4, 2, 1, 16, dtype=torch.int32)),
    _serve("v-cache-integer", "v_cache", v_cache=_ones(4, 2, 1, 16, dtype=torch.int32)),
    _serve("v-cache-blocks-differ", "v_cache", v_cache=_ones(5, 2, 1, 16)),
    _serve("v-cache-block-size-differs", "v_cache", v_cache=_ones(4, 3, 1, 16)),
    _serve("v-cache-kv-heads-differ", "v_cache", v_cache=_ones(4, 2, 2, 16)),
    _serve("q-dtype-differs", "k_cache", q=_ones(3, 2, 16, dtype=torch.float16)),
    _serve("k-cache-head-dim", "k_cache", k_cache=_ones(4, 2, 1, 8), v_cache=_ones(4, 2, 1, 8)),
    _serve(
        "heads-not-multiple",
        ("q", "k_cache", "Hq", "Hkv"),
        q=_ones(3, 3, 16),
        k_cache=_ones(4, 2, 2, 16),
        v_cache=_ones(4, 2, 2, 16),
    ),  # fmt: skip
    _serve("block-table-float", "block_table", block_table=_ints([[0, 1], [2, 3]], torch.float32)),
    _serve("block-table-bool", "block_table", block_table=_ints([[0, 1], [1, 1]], torch.bool)),
    _serve("block-table-1d", "block_table", block_table=_ints([0, 1, 2, 3])),
    _serve("cu-seqlens-float", "cu_seqlens_q", cu_seqlens_q=_ints([0, 1, 3], torch.float32)),
    _serve("cu-seqlens-2d", "cu_seqlens_q", cu_seqlens_q=_ints([[0, 1, 3]])),
    _serve("seq-lens-bool", "seq_lens", seq_lens=_ints([True, True], torch.bool)),
    _serve("seq-lens-float", "seq_lens", seq_lens=_ints([3, 4], torch.float32)),
    _serve("seq-lens-2d", "seq_lens", seq_lens=_ints([[3, 4]])),
    _serve("cu-seqlens-count", "cu_seqlens_q", cu_seqlens_q=_ints([0, 3])),
    _serve("cu-seqlens-not-from-0", "cu_seqlens_q", cu_seqlens_q=_ints([1, 2, 3])),
    _serve("cu-seqlens-not-to-T", "cu_seqlens_q", cu_seqlens_q=_ints([0, 1, 2])),
    _serve("cu-seqlens-empty-sequence", "cu_seqlens_q", cu_seqlens_q=_ints([0, 0, 3])),
    _serve("cu-seqlens-decreasing", "cu_seqlens_q", cu_seqlens_q=_ints([0, 4, 3])),
    _serve("seq-lens-count", "seq_lens", seq_lens=_ints([3])),
    _serve("block-table-extra-row", "block_table", block_table=_ints([[0, 1], [2, 3], [0, 1]])),
    _serve("query-longer-than-sequence", "seq_lens", seq_lens=_ints([3, 1])),
    _serve("block-table-too-short", "block_table", block_table=_ints([[0], [2]])),
    _serve("block-id-too-large", "block_table", block_table=_ints([[0, 4], [2, 3]])),
    _serve("block-id-negative", "block_table", block_table=_ints([[0, 1], [-1, 3]])),
    _serve("window-zero", "sliding_window", sliding_window=0),
    _serve("window-float", "sliding_window", sliding_window=2.5),
    _serve("window-bool", "sliding_window", sliding_window=True),
    *(_serve(f"softcap-{label}", "softcap", softcap=value) for label, value in _BAD_NUMBERS),
    _serve("sinks-integer", "sinks", sinks=_ints([0, 1])),
    _serve("sinks-wrong-heads", "sinks", sinks=_ones(3)),
    _serve("sinks-2d", "sinks", sinks=_ones(1, 2)),
    *(_serve(f"scale-{label}", "scale", scale=value) for label, value in _BAD_NUMBERS),
    _serve("scale-none", "scale", scale=None),
    _layers("no-num-hidden-layers", "num_hidden_layers", sliding_window=4),
    _layers("layer-types-short", "layer_types", num_hidden_layers=3, sliding_window=4, layer_types=[_FULL]),
    _layers(
        "layer-types-unknown",
        "layer_types",
        num_hidden_layers=2,
        sliding_window=4,
        layer_types=[_FULL, "chunked_attention"],
    ),  # fmt: skip
]

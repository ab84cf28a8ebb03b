"""ROPE-ERRORS as records (spec/rope.md): every bad input the clause lists, shared by the oracles'
self-test (tests/test_reference_rope.py) and the properties (conformance/test_rope.py).

Each record starts from one valid call (three tokens, two query heads and one key head of width 8,
a cache of 16 positions and rotary_dim 4) and breaks one argument; the message must name it.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from conformance.bad_input import ErrorCase, names


def _apply_call(*, positions=None, query=None, key=None, cache=None, is_neox_style=True, mrope=False):
    def build(d):
        call = {
            "positions": torch.tensor([[0, 3, 15]] * 3 if mrope else [0, 3, 15], device=d),
            "query": torch.ones(3, 2, 8, device=d),
            "key": torch.ones(3, 1, 8, device=d),
            "cos_sin_cache": torch.ones(16, 4, device=d),
        }
        for name, value in (
            ("positions", positions),
            ("query", query),
            ("key", key),
            ("cos_sin_cache", cache),
        ):
            if value is not None:
                call[name] = value(d)
        options = {"is_neox_style": is_neox_style}
        if mrope:
            options.update(mrope_section=[1, 1, 0], mrope_interleaved=False)
        return (call["positions"], call["query"], call["key"], call["cos_sin_cache"]), options

    return build


def _apply(name: str, exception, argument: str, **overrides) -> ErrorCase:
    return ErrorCase(
        "ROPE-ERRORS", "rotary_embedding", name, _apply_call(**overrides), exception, names(argument)
    )


def _config(rope_parameters=None, **fields):
    base = {"head_dim": 8, "max_position_embeddings": 64, "rope_parameters": rope_parameters}
    base.update(fields)
    return SimpleNamespace(**base)


def _freq(name: str, argument: str, config, **options) -> ErrorCase:
    call = {"seq_len": None, "layer_type": None, **options}
    return ErrorCase("ROPE-ERRORS", "rope_inv_freq", name, lambda d: ((config,), call), ValueError, argument)


def _mrope_call(section):
    build = _apply_call(mrope=True)

    def patched(d):
        args, options = build(d)
        return args, {**options, "mrope_section": section}

    return patched


ERRORS = [
    _apply("float-positions", TypeError, "positions", positions=lambda d: torch.zeros(3, device=d)),
    _apply(
        "negative-positions", ValueError, "positions", positions=lambda d: torch.tensor([0, -1, 2], device=d)
    ),
    _apply(
        "positions-past-cache",
        ValueError,
        "positions",
        positions=lambda d: torch.tensor([0, 16, 2], device=d),
    ),
    _apply("positions-shape", ValueError, "positions", positions=lambda d: torch.tensor([0, 1], device=d)),
    _apply("odd-rotary-dim", ValueError, "rotary_dim", cache=lambda d: torch.ones(16, 5, device=d)),
    _apply(
        "rotary-dim-past-head-dim", ValueError, "rotary_dim", cache=lambda d: torch.ones(16, 10, device=d)
    ),
    _apply("cache-rank", ValueError, "cos_sin_cache", cache=lambda d: torch.ones(16, 2, 2, device=d)),
    _apply("int-query", TypeError, "query", query=lambda d: torch.ones(3, 2, 8, dtype=torch.int32, device=d)),
    _apply("query-rank", ValueError, "query", query=lambda d: torch.ones(3, 16, device=d)),
    _apply("key-tokens", ValueError, "key", key=lambda d: torch.ones(2, 1, 8, device=d)),
    _apply("style-not-bool", TypeError, "is_neox_style", is_neox_style="neox"),
    ErrorCase(
        "ROPE-ERRORS",
        "mrope",
        "mrope-section-sum",
        _mrope_call([1, 1, 1]),
        ValueError,
        names("mrope_section"),
    ),
    ErrorCase(
        "ROPE-ERRORS",
        "mrope",
        "mrope-positions-rows",
        _apply_call(positions=lambda d: torch.tensor([0, 3, 15], device=d), mrope=True),
        ValueError,
        names("positions"),
    ),  # fmt: skip
    ErrorCase(
        "ROPE-ERRORS",
        "rope_cos_sin",
        "float-positions",
        lambda d: ((torch.zeros(3, device=d), torch.ones(2, device=d)), {"attention_factor": 1.0}),
        TypeError,
        names("positions"),
    ),  # fmt: skip
    ErrorCase(
        "ROPE-ERRORS",
        "rope_cos_sin",
        "inv-freq-rank",
        lambda d: ((torch.arange(3, device=d), torch.ones(2, 2, device=d)), {"attention_factor": 1.0}),
        ValueError,
        names("inv_freq"),
    ),  # fmt: skip
    _freq("unknown-rope-type", "rope_type", _config({"rope_type": "ntk-by-parts"})),
    _freq("base-zero", "rope_theta", _config({"rope_type": "default", "rope_theta": 0.0})),
    _freq("base-negative", "rope_theta", _config({"rope_type": "default", "rope_theta": -10000.0})),
    _freq(
        "llama3-missing-key",
        "low_freq_factor",
        _config({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}),
    ),  # fmt: skip
    _freq("linear-missing-factor", "factor", _config({"rope_type": "linear"})),
    _freq(
        "longrope-missing-factors",
        "long_factor",
        _config({"rope_type": "longrope", "short_factor": [1.0] * 4}),
    ),
    _freq("odd-rotary-dim", "rotary_dim", _config({"rope_type": "default", "partial_rotary_factor": 0.375})),
    _freq(
        "per-layer-without-layer-type",
        "layer_type",
        _config(
            {"sliding_attention": {"rope_type": "default"}, "full_attention": {"rope_type": "default"}},
            layer_types=["sliding_attention", "full_attention"],
        ),
    ),  # fmt: skip
    _freq("seq-len-zero", "seq_len", _config({"rope_type": "default"}), seq_len=0),
    ErrorCase(
        "ROPE-ERRORS",
        "rope_kernel_args",
        "style-not-bool",
        lambda d: (("half",), {}),
        TypeError,
        names("is_neox_style"),
    ),  # fmt: skip
]

"""Conformance properties for spec/rope.md's config readers: rope_inv_freq (ROPE-FREQ, its
refinements per rope type, ROPE-PARAMS, ROPE-LAYER) and rope_softmax_scale (ROPE-SOFTMAX-SCALE).
Frequencies are compared by the ``rope-freq`` rows of ROPE-TOL, the attention factor and the scale
to 1e-6 relative."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from conformance.checks import ConformanceError, assert_close, check, describe
from conformance.harness import profiles
from conformance.strategies.common import pinned_draw
from conformance.strategies.rope import rope_configs
from reference import rope as oracle
from reference.rope_config import fixed_length_dynamic_inv_freq

FEW = profiles.share_of_examples(1 / 3)
# DeepSeek-V3's config.json rope fields (YaRN, factor 40, mscale = mscale_all_dim = 1; qk_head_dim 192).
DEEPSEEK_V3 = SimpleNamespace(
    head_dim=64, max_position_embeddings=163840, rope_theta=10000.0,
    rope_scaling={"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32,
                  "beta_slow": 1, "original_max_position_embeddings": 4096},
)  # fmt: skip
# Phi-3-mini-128k's rope (its config.json): LongRoPE over rotary_dim 96, original length 4096 kept
# outside the dict; factor lists of 48 (shortened here to two values repeated, the switch is the point).
PHI3_MINI_128K = SimpleNamespace(
    hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072, rope_theta=10000.0,
    original_max_position_embeddings=4096,
    rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1] * 24, "long_factor": [1.5, 2.5] * 24},
)  # fmt: skip
# gpt-oss's rope (GptOssConfig's defaults, transformers 5.24): YaRN with truncate=False, flat.
GPT_OSS = SimpleNamespace(
    head_dim=64, max_position_embeddings=131072,
    rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "truncate": False, "original_max_position_embeddings": 4096, "rope_theta": 150000.0},
)  # fmt: skip


def config_text(config) -> str:
    """A drawn config's fields; a model's transformers config (a profile run) by its class and rope."""
    if isinstance(config, dict | SimpleNamespace):
        return str(config if isinstance(config, dict) else vars(config))
    return f"{type(config).__name__}(rope_parameters={getattr(config, 'rope_parameters', None)})"


def _compare_freq(backend, device, drawn, clause: str) -> None:
    config, seq_len, layer_type = drawn
    got = backend.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)
    want, factor = oracle.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)
    call = describe(backend, device, "rope_inv_freq", seq_len=seq_len, layer_type=layer_type)
    context = f"{call}: {config_text(config)}"
    check(
        isinstance(got, tuple | list) and len(got) == 2,
        clause=clause,
        message=f"{context}: returned {type(got).__name__}, expected (inv_freq, attention_factor)",
    )
    inv, attention = got
    check(
        isinstance(inv, torch.Tensor) and inv.dtype in (torch.float32, torch.float64),
        clause=clause,
        message=f"{context}: inv_freq is {getattr(inv, 'dtype', type(inv).__name__)}, expected float32/64",
    )
    fixed = fixed_length_dynamic_inv_freq(config, layer_type=layer_type)
    if fixed is not None:  # ROPE-FREQ-DYNAMIC: one cache at M * factor (sglang's), the other convention
        try:
            assert_close(inv.cpu(), fixed, clause=clause, family="rope-freq", context=context)
            want = fixed
        except ConformanceError:
            pass
    assert_close(inv.cpu(), want, clause=clause, family="rope-freq", context=f"{context}: inv_freq")
    check(
        math.isclose(float(attention), factor, rel_tol=1e-6),
        clause=clause,
        message=f"{context}: attention_factor {float(attention)!r}, expected {factor!r}",
    )


@pytest.mark.clause("ROPE-FREQ")
@pytest.mark.op("rope_inv_freq")
@FEW
@given(drawn=rope_configs())
def test_inv_freq_matches_oracle(backend, device, drawn):
    """Every rope type, flat, per-layer and config.json forms, seq_len below, at and past the config's."""
    _compare_freq(backend, device, drawn, "ROPE-FREQ")


@pytest.mark.clause("ROPE-FREQ-LLAMA3")
@pytest.mark.op("rope_inv_freq")
@FEW
@given(drawn=rope_configs(rope_types=("llama3",), per_layer=False))
def test_llama3_bands(backend, device, drawn):
    """Llama 3.1's bands: unchanged, divided by factor, blended."""
    _compare_freq(backend, device, drawn, "ROPE-FREQ-LLAMA3")


@pytest.mark.clause("ROPE-FREQ-YARN")
@pytest.mark.op("rope_inv_freq")
@FEW
@given(drawn=rope_configs(rope_types=("yarn",)))
@example(drawn=(GPT_OSS, None, None))  # truncate=False as a released model has it, always run
def test_yarn_ramp_and_mscale(backend, device, drawn):
    """YaRN's ramp, truncation, betas and attention factor (mscale) as the config gives them."""
    _compare_freq(backend, device, drawn, "ROPE-FREQ-YARN")


@pytest.mark.clause("ROPE-FREQ-DYNAMIC")
@pytest.mark.op("rope_inv_freq")
@FEW
@given(drawn=rope_configs(rope_types=("dynamic",)))
def test_dynamic_ntk_length(backend, device, drawn):
    """Dynamic NTK's base from max(seq_len, max_position_embeddings)."""
    _compare_freq(backend, device, drawn, "ROPE-FREQ-DYNAMIC")


@pytest.mark.clause("ROPE-FREQ-LONGROPE")
@pytest.mark.op("rope_inv_freq")
@FEW
@given(drawn=rope_configs(rope_types=("longrope",)))
@example(drawn=(PHI3_MINI_128K, 4095, None))  # the switch at T - 1, T and T + 1, always run
@example(drawn=(PHI3_MINI_128K, 4096, None))
@example(drawn=(PHI3_MINI_128K, 4097, None))
def test_longrope_factor_lists(backend, device, drawn):
    """short_factor up to the pretraining length, long_factor past it; the attention factor."""
    _compare_freq(backend, device, drawn, "ROPE-FREQ-LONGROPE")


@pytest.mark.clause("ROPE-LAYER")
@pytest.mark.op("rope_inv_freq")
@FEW
@given(drawn=rope_configs(per_layer=True, rope_types=("default", "linear", "yarn")))
def test_per_layer_rope(backend, device, drawn):
    """Gemma3-style configs: sliding layers the local base, full layers the global base and scaling."""
    _compare_freq(backend, device, drawn, "ROPE-LAYER")


@pytest.mark.clause("ROPE-LAYER-TRUNCATE")
@pytest.mark.op("rope_inv_freq")
@profiles.should_examples(1 / 3)
@given(drawn=rope_configs(per_layer=True, rope_types=("yarn",), layer_truncate=True))
def test_should_read_truncate_from_the_layer_dict(backend, device, drawn):
    """A full layer's YaRN dict with truncate=False: the correction range is not rounded."""
    _compare_freq(backend, device, drawn, "ROPE-LAYER-TRUNCATE")


_GEMMA3_JSON = {
    "head_dim": 256,
    "max_position_embeddings": 131072,
    "rope_theta": 1e6,
    "rope_local_base_freq": 1e4,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
}
# Gemma3's config.json forms: both bases given (no model_type needed), then a gemma3_text config that
# leaves out rope_theta and/or rope_local_base_freq (Gemma3TextConfig's defaults 1e6 and 1e4), each as
# an object and as the plain dict of a config.json.
_GEMMA3_CASES = {
    "both-bases": _GEMMA3_JSON,
    "no-rope-theta": {**_GEMMA3_JSON, "model_type": "gemma3_text", "rope_theta": None},
    "no-local-base": {**_GEMMA3_JSON, "model_type": "gemma3_text", "rope_local_base_freq": None},
    "no-bases": {
        **_GEMMA3_JSON,
        "model_type": "gemma3_text",
        "rope_theta": None,
        "rope_local_base_freq": None,
    },  # fmt: skip
}


@pytest.mark.clause("ROPE-LAYER")
@pytest.mark.op("rope_inv_freq")
@pytest.mark.parametrize("form", ["object", "dict"])
@pytest.mark.parametrize("case", sorted(_GEMMA3_CASES))
@pytest.mark.parametrize("layer_type", ["sliding_attention", "full_attention"])
def test_gemma3_config_json(backend, device, layer_type, case, form):
    """Gemma3's config.json form: rope_local_base_freq (default 1e4, default type) for sliding layers,
    rope_theta (default 1e6) and rope_scaling for full ones; a left-out base takes Gemma3's default."""
    fields = {key: value for key, value in _GEMMA3_CASES[case].items() if value is not None}
    config = SimpleNamespace(**fields) if form == "object" else fields
    _compare_freq(backend, device, (config, None, layer_type), "ROPE-LAYER")


@pytest.mark.clause("ROPE-PARAMS")
@pytest.mark.op("rope_inv_freq")
@FEW
@given(drawn=rope_configs(per_layer=False))
def test_missing_keys_take_transformers_defaults(backend, device, drawn):
    """Configs with optional fields left out (theta, head_dim, partial factor, yarn's keys, the
    pretraining length) read as transformers standardizes them."""
    _compare_freq(backend, device, drawn, "ROPE-PARAMS")


@pytest.mark.clause("ROPE-SOFTMAX-SCALE")
@pytest.mark.op("rope_softmax_scale")
@FEW
@given(
    drawn=rope_configs(rope_types=("default", "yarn", "linear"), per_layer=False, any_model_type=True),
    scale=pinned_draw("rope.base_scale", st.sampled_from((192**-0.5, 0.125, 1.0))),  # MODEL-RUN: its own
)
@example(drawn=(DEEPSEEK_V3, None, None), scale=192**-0.5)  # the case the clause exists for, always run
def test_softmax_scale(backend, device, drawn, scale):
    """DeepSeek's mscale^2 when mscale_all_dim is set on a scaled rope, the base scale otherwise."""
    config = drawn[0]
    got = backend.rope_softmax_scale(config, scale=scale)
    want = oracle.rope_softmax_scale(config, scale=scale)
    context = f"{describe(backend, device, 'rope_softmax_scale', scale=scale)}: {config_text(config)}"
    check(
        isinstance(got, int | float) and math.isclose(got, want, rel_tol=1e-6),
        clause="ROPE-SOFTMAX-SCALE",
        message=f"{context}: got {got!r}, expected {want!r}",
    )

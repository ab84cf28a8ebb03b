"""Correct rope code from the field passes the rope clauses (never a false alarm): each case is a
reader written from an upstream formula, run through the property's own comparison."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from backends.native import NativeBackend
from conformance.checks import ConformanceError
from conformance.strategies.rope import rope_configs
from conformance.test_rope_config import _compare_freq
from reference.rope_config import rope_parameters


class VllmDynamicNtk(NativeBackend):
    """vLLM's DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache (spec/rope.md,
    ROPE-FREQ-DYNAMIC's sources): one cache at max_len = max_position_embeddings * factor."""

    name = "vllm-dynamic-ntk"

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        d = rope_parameters(config, layer_type)
        if d["rope_type"] != "dynamic":  # a Gemma3-style layer of another type
            return super().rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)
        longest, factor, dim = d["max_position_embeddings"], d["factor"], d["rotary_dim"]
        max_len = longest * factor
        base = d["rope_theta"] * (factor * max_len / longest - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0


class UnclampedLength(VllmDynamicNtk):
    """WRONG (as mutant rope-dynamic-wrong-length): seq_len used below max_position_embeddings."""

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        d = rope_parameters(config, layer_type)
        longest, factor, dim = d["max_position_embeddings"], d["factor"], d["rotary_dim"]
        length = seq_len or longest
        base = d["rope_theta"] * (factor * length / longest - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0


@settings(max_examples=20, deadline=None, database=None)
@given(drawn=rope_configs(rope_types=("dynamic",)))
def test_vllm_fixed_length_dynamic_ntk_conforms(drawn):
    """ROPE-FREQ-DYNAMIC: vLLM's fixed length M * factor is the field's second convention."""
    _compare_freq(VllmDynamicNtk(), torch.device("cpu"), drawn, "ROPE-FREQ-DYNAMIC")


def test_an_unclamped_length_still_fails():
    """Accepting vLLM's length does not accept every length: seq_len below M unclamped fails."""
    from types import SimpleNamespace

    rope = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    config = SimpleNamespace(max_position_embeddings=4096, head_dim=64, rope_parameters=rope)
    with pytest.raises(ConformanceError, match=r"^\[ROPE-FREQ-DYNAMIC\]"):
        _compare_freq(UnclampedLength(), torch.device("cpu"), (config, 1000, None), "ROPE-FREQ-DYNAMIC")

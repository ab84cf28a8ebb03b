"""Released framework code the contract must accept, run through the suite as a user's backend
(``--backend-module``): vLLM 0.33's norm ops, dynamic NTK rope and Cohere2 windows (spec/norms.md
NORM-MIXED, spec/rope.md ROPE-FREQ-DYNAMIC, spec/serving.md SERVE-LAYER-WINDOWS), and vLLM 0.33's
dynamic NTK as Llama calls it, which must still fail (plain rope over a cache too short)."""

from __future__ import annotations

import textwrap

import pytest
from suite_runner import failed_clauses, outcomes, produced_once, run_suite

# vLLM 0.33.0 (released wheel), transcribed: vllm/ir/ops/layernorm.py ``rms_norm`` and
# ``fused_add_rms_norm`` (the native forms RMSNorm.forward_native calls), and
# vllm/model_executor/layers/layernorm.py ``GemmaRMSNorm.forward_native`` (weight.float() + 1.0).
VLLM_NORMS = """
import torch


def ir_rms_norm(x, weight, epsilon):
    orig_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + epsilon)
    x = x.to(weight.dtype) * weight
    return x.to(orig_dtype)


def ir_fused_add_rms_norm(x, x_residual, weight, epsilon):
    orig_dtype = x.dtype
    x = x.to(torch.float32)
    x = x + x_residual.to(torch.float32)
    x_residual = x.to(orig_dtype)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + epsilon)
    x = x.to(weight.dtype) * weight
    return x.to(orig_dtype), x_residual


class VllmNorms:
    name = "vllm-0.33-norms"

    def unavailable(self, device):
        return None

    def rms_norm(self, x, weight, *, eps):
        return ir_rms_norm(x, weight, eps)

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        return ir_fused_add_rms_norm(x, residual, weight, eps)

    def gemma_rms_norm(self, x, weight, *, eps):
        return ir_rms_norm(x, weight.float() + 1.0, eps)

    def gemma_fused_add_rms_norm(self, x, residual, weight, *, eps):
        return ir_fused_add_rms_norm(x, residual, weight.float() + 1.0, eps)


BACKEND = VllmNorms()
"""

# vLLM 0.33.0, transcribed: rotary_embedding/dynamic_ntk_scaling_rope.py
# ``DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache`` (base) with base.py's
# ``_compute_inv_freq``; ``get_rope`` passes ``rope_parameters.get("max_trained_positions",
# max_position)``. NomicBertModelConfig (models/config.py) passes max_position = max_model_len, which
# _get_and_verify_max_len (config/model.py) makes M * factor, and max_trained_positions = M;
# LlamaAttention (models/llama.py) passes max_position = M and no max_trained_positions.
VLLM_DYNAMIC_NTK = '''
import torch

from reference.rope_config import rope_parameters


def vllm_inv_freq(base, rotary_dim):
    return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))


def dynamic_ntk_base(base, rotary_dim, scaling_factor, max_position_embeddings, max_trained_positions):
    return base * (
        (scaling_factor * max_position_embeddings / max_trained_positions) - (scaling_factor - 1)
    ) ** (rotary_dim / (rotary_dim - 2))


class VllmDynamicNtk:
    """rope_inv_freq of vLLM's DynamicNTKScalingRotaryEmbedding, built as NomicBert's config does."""

    name = "vllm-0.33-dynamic-ntk-nomic-args"

    def unavailable(self, device):
        return None

    def lengths(self, longest, factor):
        return int(longest * factor), longest  # (max_position = max_model_len, max_trained_positions)

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        d = rope_parameters(config, layer_type)
        base, dim = d["rope_theta"], d["rotary_dim"]
        if d["rope_type"] == "default":
            return vllm_inv_freq(base, dim), 1.0
        if d["rope_type"] != "dynamic":
            raise NotImplementedError(d["rope_type"])
        served, trained = self.lengths(d["max_position_embeddings"], d["factor"])
        return vllm_inv_freq(dynamic_ntk_base(base, dim, d["factor"], served, trained), dim), 1.0


class VllmDynamicNtkLlamaArgs(VllmDynamicNtk):
    """The same rope as LlamaAttention builds it: served = trained = M, so plain rope (WRONG past M)."""

    name = "vllm-0.33-dynamic-ntk-llama-args"

    def lengths(self, longest, factor):
        return longest, longest


BACKEND = [VllmDynamicNtk(), VllmDynamicNtkLlamaArgs()]
'''

# vLLM 0.33.0, transcribed: models/commandr.py ``CohereAttention.__init__``: a Cohere2 layer whose
# ``config.layer_types`` entry is "sliding_attention" gets ``config.sliding_window + 1``. Which layers
# slide without layer_types (transformers' Cohere2Config fills it) and other model types: native.
VLLM_COHERE2_WINDOWS = """
from backends import paged


class VllmCohere2Windows:
    name = "vllm-0.33-cohere2-windows"

    def unavailable(self, device):
        return None

    def layer_windows(self, config):
        windows = paged.layer_windows(config)
        if getattr(config, "model_type", None) != "cohere2":
            return windows
        layer_types = getattr(config, "layer_types", None)
        if layer_types is None:
            layer_types = ["full_attention" if w is None else "sliding_attention" for w in windows]
        return [config.sliding_window + 1 if kind == "sliding_attention" else None for kind in layer_types]


BACKEND = VllmCohere2Windows()
"""

MODULES = {
    "vllm_norms": VLLM_NORMS,
    "vllm_dynamic_ntk": VLLM_DYNAMIC_NTK,
    "vllm_cohere2_windows": VLLM_COHERE2_WINDOWS,
}
PATHS = [
    "conformance/test_norms.py",
    "conformance/test_rope_config.py::test_dynamic_ntk_length",
    "conformance/test_serving_windows.py",
]


@pytest.fixture(scope="module")
def upstream_run(tmp_path_factory):
    """One suite run (one subprocess) of the norm, dynamic NTK and layer-window properties against
    the transcribed vLLM 0.33 backends; SHOULD properties (bad input, which vLLM does not check) left out."""

    def produce(folder):
        for name, source in MODULES.items():
            (folder / f"{name}.py").write_text(textwrap.dedent(source))
        return run_suite(
            folder, paths=PATHS, modules=list(MODULES), extra=["--device", "cpu", "-k", "not should"],
            pythonpath=[folder],
        )  # fmt: skip

    return produced_once(tmp_path_factory, "opconform-upstream-conventions", produce)


@pytest.mark.parametrize(
    "backend", ["vllm-0.33-norms", "vllm-0.33-dynamic-ntk-nomic-args", "vllm-0.33-cohere2-windows"]
)
def test_vllm_033_passes_the_must_clauses(upstream_run, backend):
    """vLLM 0.33's norm ops (a float32 x with a bfloat16 weight rounded to bfloat16), its dynamic NTK
    with NomicBert's arguments and its Cohere2 W + 1 windows pass every property they are drawn in."""
    counts = outcomes(upstream_run, backend)
    assert counts.get("passed", 0) > 0 and "failed" not in counts, (counts, upstream_run["stdout"][-3000:])


def test_vllm_033_dynamic_ntk_as_llama_calls_it_still_fails(upstream_run):
    """Plain rope for a sequence past max_position_embeddings (vLLM 0.33 with Llama's arguments,
    whose cache is that long) is still a ROPE-FREQ-DYNAMIC failure."""
    broken = failed_clauses(upstream_run).get("vllm-0.33-dynamic-ntk-llama-args", set())
    assert "ROPE-FREQ-DYNAMIC" in broken, upstream_run["stdout"][-3000:]

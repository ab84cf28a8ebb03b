"""vLLM 0.33's norm ops, dynamic NTK rope and Cohere2 windows, transcribed: the sources of three backend
modules (``MODULES``) that ``write`` puts in a folder, for tests/test_upstream_conventions.py to load
through ``--backend-module`` as a user's backend would be (tests/convention_runs.py runs them).

Each backend declares ``clauses`` (CLAUSES, written into each module): those of the properties of
PROPERTIES but the SHOULD ones (NORM-ERRORS, NORM-VIEWS: bad input, which vLLM does not check),
so that the shared run's ``--focus-declared-clauses`` gives them exactly those properties.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

PROPERTIES = [
    "conformance/test_norms.py",
    "conformance/test_rope_config.py::test_dynamic_ntk_length",
    "conformance/test_serving_windows.py",
]
CLAUSES = frozenset({
    "NORM-DTYPE", "NORM-EPS", "NORM-FUSED-ADD", "NORM-GEMMA", "NORM-LAYOUT", "NORM-MIXED", "NORM-RMS",
    "ROPE-FREQ-DYNAMIC", "SERVE-LAYER-WINDOWS", "SERVE-WINDOW-ARGS",
})  # fmt: skip

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
    clauses = CLAUSES

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
    clauses = CLAUSES

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
    clauses = CLAUSES

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


def write(folder: Path) -> None:
    """Each of MODULES as ``folder/NAME.py``, its backends declaring CLAUSES."""
    declared = f"CLAUSES = frozenset({sorted(CLAUSES)!r})\n"
    for name, source in MODULES.items():
        (folder / f"{name}.py").write_text(declared + textwrap.dedent(source))

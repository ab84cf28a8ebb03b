"""Conformance properties of the config-level ops on model configurations (spec/models.md,
MODEL-CONFIG-OPS): layer_windows, window_kernel_args, moe_router_config, swiglu_limit and
quant_scheme given a model's own transformers config object, judged by the oracles on the same
object. A profile run
checks its model's config (the pin ``model.config``, MODEL-RUN); any other run every built-in
profile's (transformers' config classes; skipped without transformers)."""

from __future__ import annotations

import copy

import pytest

from conformance.checks import check
from conformance.strategies.common import pinned_values
from conformance.test_serving_windows import check_layer_windows, check_window_args
from reference import activations, serving
from reference.moe_config import MODEL_TYPES as MOE_MODEL_TYPES
from reference.moe_config import moe_router_config
from reference.quant_config import quant_scheme


def _configs(model_types=None) -> list[tuple[str, object]]:
    """(name, config): the profile run's model's (a copy: a backend may write to it), else every
    built-in profile's; only those of ``model_types`` when given."""
    pinned = pinned_values("model.config")
    if pinned:
        found = [(name, copy.deepcopy(config)) for name, config in pinned]
    else:
        pytest.importorskip(
            "transformers", reason="transformers is not installed (the built-in profiles' configs)"
        )
        from conformance.models.configs import builtin_configs

        found = builtin_configs()
    return [(n, c) for n, c in found if model_types is None or getattr(c, "model_type", None) in model_types]


@pytest.mark.clause("SERVE-LAYER-WINDOWS")
@pytest.mark.op("layer_windows")
def test_layer_windows_of_model_configs(backend, device):
    """Each model config's window per layer: the oracle's, Cohere2's W or W + 1 aside."""
    for name, config in _configs():
        check_layer_windows(backend, config, label=f"layer_windows of {name}'s {type(config).__name__}")


@pytest.mark.clause("SERVE-WINDOW-ARGS")
@pytest.mark.op("window_kernel_args")
def test_window_args_at_model_windows(backend, device):
    """Both kernels' window arguments keep exactly W keys at each window a model config's layers have."""
    windows = {w for _, config in _configs() for w in serving.layer_windows(config)}
    for window in sorted(windows, key=lambda w: (w is not None, w or 0)):
        check_window_args(backend, window)


@pytest.mark.clause("MOE-CONFIG")
@pytest.mark.op("moe_router_config")
def test_router_config_of_model_configs(backend, device):
    """Each MoE model config's select_experts keywords, bias use and output scale: the oracle's."""
    for name, config in _configs(MOE_MODEL_TYPES):
        got = backend.moe_router_config(config)
        want = moe_router_config(config)
        check(got == want, clause="MOE-CONFIG",
              message=f"moe_router_config of {name}'s {type(config).__name__} on {backend.name!r}: {got}, "
              f"expected {want}")  # fmt: skip


@pytest.mark.clause("ACT-LIMIT-CONFIG")
@pytest.mark.op("swiglu_limit")
def test_limit_of_model_configs(backend, device):
    """Each layer's routed and shared limit of a Step-3.5 model config: the oracle's."""
    for name, config in _configs(("step3p5",)):
        layers = range(int(config.num_hidden_layers))
        got = [[backend.swiglu_limit(config, i, shared=s) for i in layers] for s in (False, True)]
        want = [[activations.swiglu_limit(config, i, shared=s) for i in layers] for s in (False, True)]
        check(got == want, clause="ACT-LIMIT-CONFIG",
              message=f"backend {backend.name!r}: {name}'s {type(config).__name__} gives routed/shared "
              f"limits {got}, expected {want}")  # fmt: skip


@pytest.mark.clause("QUANT-CONFIG")
@pytest.mark.op("quant_scheme")
def test_quant_scheme_of_model_configs(backend, device):
    """Each quantized model config's scheme (MODEL-QUANT): the oracle's, from the config object."""
    found = [(name, config) for name, config in _configs() if getattr(config, "quantization_config", None)]
    for name, config in found:
        got = backend.quant_scheme(config)
        want = quant_scheme(config)
        check(got == want, clause="QUANT-CONFIG",
              message=f"quant_scheme of {name}'s {type(config).__name__} on {backend.name!r}: {got}, "
              f"expected {want}")  # fmt: skip

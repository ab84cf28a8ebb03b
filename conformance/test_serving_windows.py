"""Conformance properties for spec/serving.md's window clauses: the windows per layer a model config
gives (SERVE-LAYER-WINDOWS) and each kernel's raw window arguments (SERVE-WINDOW-ARGS)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conformance.checks import check
from reference import serving


def _plain(model_type, layers, window, **fields):
    return SimpleNamespace(model_type=model_type, num_hidden_layers=layers, sliding_window=window, **fields)


_S, _F = "sliding_attention", "full_attention"
# (config, the windows spec/serving.md SERVE-LAYER-WINDOWS gives, written out by hand)
PLAIN_CONFIGS = {
    "gemma2": (_plain("gemma2", 5, 4), [4, None, 4, None, 4]),
    "gemma3-pattern-3": (_plain("gemma3_text", 7, 8, sliding_window_pattern=3), [8, 8, None, 8, 8, None, 8]),
    "cohere2-pattern-4": (_plain("cohere2", 4, 16, sliding_window_pattern=4), [16, 16, 16, None]),
    "mistral": (_plain("mistral", 3, 16), [16, 16, 16]),
    "other-type-with-window": (_plain("starcoder2", 2, 32), [32, 32]),
    "gpt-oss": (_plain("gpt_oss", 3, 128), [128, None, 128]),
    "qwen2-max-window-layers": (
        _plain("qwen2", 4, 32, use_sliding_window=True, max_window_layers=2),
        [None, None, 32, 32],
    ),
    "qwen2-default-max-window-layers": (
        _plain("qwen2", 30, 32, use_sliding_window=True),
        [None] * 28 + [32] * 2,
    ),
    "qwen2-use-sliding-window-missing": (_plain("qwen2", 3, 32, max_window_layers=1), [None] * 3),
    "qwen2-moe": (
        _plain("qwen2_moe", 5, 32, use_sliding_window=True, max_window_layers=3),
        [32, None, 32, None, None],
    ),
    "qwen2-moe-use-sliding-window-missing": (_plain("qwen2_moe", 3, 32, max_window_layers=3), [None] * 3),
    "qwen3-moe-use-sliding-window-missing": (_plain("qwen3_moe", 2, 32), [None] * 2),
    "qwen3-moe": (_plain("qwen3_moe", 2, 32, use_sliding_window=True), [32, 32]),
    "gemma3-default-pattern": (_plain("gemma3_text", 7, 8), [8] * 5 + [None, 8]),
    "cohere2-default-pattern": (_plain("cohere2", 5, 16), [16, 16, 16, None, 16]),
    "no-window": (_plain("gemma2", 4, None), [None] * 4),
    "use-sliding-window-false": (_plain("qwen2", 3, 32, use_sliding_window=False), [None] * 3),
    "layer-types": (_plain("llama", 3, 5, layer_types=[_F, _S, _S]), [None, 5, 5]),
    "layer-types-over-gemma2-rule": (_plain("gemma2", 3, 6, layer_types=[_F, _F, _S]), [None, None, 6]),
}


@pytest.mark.clause("SERVE-LAYER-WINDOWS")
@pytest.mark.op("layer_windows")
@pytest.mark.parametrize("name", sorted(PLAIN_CONFIGS))
def test_layer_windows_of_plain_configs(backend, device, name):
    """layer_types when present, else the model type's rule (even layers, pattern, max_window_layers, all);
    Cohere2's sliding layers W or W + 1 keys."""
    config, want = PLAIN_CONFIGS[name]
    check_layer_windows(backend, config, want=want, label=f"layer_windows({config})")


TRANSFORMERS_CONFIGS = ("Gemma2Config", "Gemma3TextConfig", "GptOssConfig", "Cohere2Config", "MistralConfig",
                        "Qwen2Config", "Qwen3Config", "Qwen2MoeConfig", "Qwen3MoeConfig")  # fmt: skip


@pytest.mark.clause("SERVE-LAYER-WINDOWS")
@pytest.mark.op("layer_windows")
@pytest.mark.parametrize("class_name", TRANSFORMERS_CONFIGS)
def test_layer_windows_of_transformers_configs(backend, device, class_name):
    """transformers' configs, 1, 4, 7, 13 layers: the oracle's (layer_types') windows; Cohere2 W or W + 1."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    for layers in (1, 4, 7, 13):
        config = getattr(transformers, class_name)(num_hidden_layers=layers)
        label = f"layer_windows({class_name}(num_hidden_layers={layers}))"
        note = f"layer_types {getattr(config, 'layer_types', None)}"
        check_layer_windows(backend, config, label=label, note=note)


@pytest.mark.clause("SERVE-WINDOW-ARGS")
@pytest.mark.op("window_kernel_args")
@pytest.mark.parametrize("window", [None, 1, 2, 3, 8, 127, 4096, 1 << 20])
def test_prefill_and_decode_keep_the_same_window(backend, device, window):
    """Both kernels' raw window arguments keep exactly W keys (both unbounded without a window)."""
    check_window_args(backend, window)


def check_layer_windows(backend, config, *, label: str, want=None, note: str | None = None) -> None:
    """SERVE-LAYER-WINDOWS on one config: the backend's windows per layer are ``want`` (the oracle's
    when not given), Cohere2's sliding layers W or W + 1 (conformance/test_model_configs.py too)."""
    want = serving.layer_windows(config) if want is None else want
    got = backend.layer_windows(config)
    said = f" ({note})" if note else ""
    check(got in serving.accepted_layer_windows(config, want), clause="SERVE-LAYER-WINDOWS",
          message=f"backend {backend.name!r}: {label} = {got}, expected {want}{said}")  # fmt: skip


def check_window_args(backend, window) -> None:
    """SERVE-WINDOW-ARGS at one window (conformance/test_model_configs.py: a model's windows)."""
    args = backend.window_kernel_args(window)
    check(isinstance(args, dict) and {"prefill", "decode"} <= set(args), clause="SERVE-WINDOW-ARGS",
          message=f"backend {backend.name!r}: window_kernel_args({window}) = {args!r}; expected a dict "
          "with 'prefill' and 'decode'")  # fmt: skip
    unknown = [path for path in ("prefill", "decode") if not serving.known_window_api(args[path])]
    if unknown:  # an API the table does not know: its window arguments are not judged, never failed
        shown = {path: args[path] for path in unknown}
        pytest.skip(f"not judged: SERVE-WINDOW-ARGS' table knows no argument of {shown}")
    kept = {path: serving.window_keys(args[path]) for path in ("prefill", "decode")}
    check(kept == {"prefill": window, "decode": window}, clause="SERVE-WINDOW-ARGS",
          message=f"backend {backend.name!r}: window_kernel_args({window}) = {args} keeps {kept} keys; "
          f"expected {window} on both paths")  # fmt: skip

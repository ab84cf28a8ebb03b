"""Serving mutants of the layer windows a config gives (spec/serving.md, SERVE-LAYER-WINDOWS).

Part of the ``serving`` family: ``mutants/serving.py`` lists them in its ``BACKENDS``.
"""

from __future__ import annotations

from backends import paged
from backends.native import NativeBackend


class QwenWindowSwitchDefaultsOn(NativeBackend):
    """A Qwen config without ``use_sliding_window`` read as if the switch were on, so the layers from
    ``max_window_layers`` slide; transformers' Qwen configs default the switch to False.

    Origin: this suite's own oracle before issue 18 (``getattr(config, "use_sliding_window", True)``).
    Caught by: SERVE-LAYER-WINDOWS.
    """

    clauses = {"SERVE-LAYER-WINDOWS"}

    def layer_windows(self, config):
        if getattr(config, "layer_types", None) is None and not hasattr(config, "use_sliding_window"):
            config = type(config)(**{**vars(config), "use_sliding_window": True})
        return paged.layer_windows(config)


class Cohere2WindowPlusTwo(NativeBackend):
    """Cohere2's sliding layers get W + 2 keys: vLLM's commandr.py window (``config.sliding_window + 1``,
    inclusive: W + 1 keys, which SERVE-LAYER-WINDOWS accepts) handed to a kernel API whose window is
    exclusive (left = window, sglang's RadixAttention convention), which adds one more key.

    Origin: spec/serving.md, SERVE-LAYER-WINDOWS (Cohere2's window, Sources): the two serving
    frameworks' conventions combined in one port.
    Caught by: SERVE-LAYER-WINDOWS.
    """

    clauses = {"SERVE-LAYER-WINDOWS"}

    def layer_windows(self, config):
        windows = paged.layer_windows(config)
        if getattr(config, "model_type", None) != "cohere2":
            return windows
        return [None if w is None else w + 2 for w in windows]

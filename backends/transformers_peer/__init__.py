"""The ``transformers`` backend: the field's reference, every op transformers implements computed by
the installed transformers' own code (the ``peers`` extra).

Design (the einops ``_backends`` pattern): one small section class per op family, in its own module
(``activations``, ``norms``, ``rope``, ``moe``, ``masks``, ``attention``), combined into one backend
class. Nothing imports transformers at import time: ``_hf.hf_module`` imports a transformers module the
first time an op needs it, so the seconds that costs are paid only when a case of this backend runs,
and ``unavailable`` only looks the package up.

Each op instantiates the real module (or calls the real function) of the model that computes it and
only maps the protocol's arguments to that call: shapes and layouts, a config object built from the
arguments, the given weights as the module's parameters. Where transformers has no code for what the
protocol asks, the op is a ``NotImplementedOp`` (n/i) or the call raises NotImplementedError naming the
combination; nothing is re-implemented. transformers' modules validate nothing, so neither does this
backend: its bad-input (SHOULD) clauses fail by design. Each section's docstring names the modules.
Paged serving, the KV-cache write and the scheduler are not defined here (n/i): transformers has no
paged attention or cache-write kernel, and its scheduler is diffusers'.
"""

from __future__ import annotations

import importlib.util

import torch

from backends.transformers_peer.activations import TransformersActivations
from backends.transformers_peer.attention import TransformersAttention
from backends.transformers_peer.masks import TransformersMasks
from backends.transformers_peer.moe import TransformersMoe
from backends.transformers_peer.norms import TransformersNorms
from backends.transformers_peer.rope import TransformersRope

__all__ = ["BACKEND", "TransformersBackend"]


class TransformersBackend(TransformersActivations, TransformersNorms, TransformersRope, TransformersMoe,
                          TransformersMasks, TransformersAttention):  # fmt: skip
    name = "transformers"

    def unavailable(self, device: torch.device) -> str | None:
        # find_spec, not an import: importing transformers' modeling code takes seconds.
        try:
            found = importlib.util.find_spec("transformers.masking_utils") is not None
        except ImportError:
            found = False
        if not found:
            return "transformers (>= 4.48, with masking_utils) is not installed: the optional 'peers' extra"
        return None


BACKEND = TransformersBackend()

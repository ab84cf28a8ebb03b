"""The ``transformers`` backend: MASK-ENC from ``transformers.masking_utils`` (the ``peers`` extra).

It builds the encoder mask the way HF models do: ``sdpa_mask`` with ``causal_mask_function``,
``and_masks(causal, sliding_window_overlay(W))`` for a window, and the 2-D padding mask as
``attention_mask``. transformers is imported lazily; without it the backend is a skip.
"""

from __future__ import annotations

import importlib
import importlib.util

import torch

from reference.masks import validate_encoder_mask_args


def _masking_utils():
    return importlib.import_module("transformers.masking_utils")


class TransformersBackend:
    name = "transformers"

    def unavailable(self, device: torch.device) -> str | None:
        # find_spec, not an import: importing transformers takes seconds, paid only when used.
        try:
            found = importlib.util.find_spec("transformers.masking_utils") is not None
        except ImportError:
            found = False
        if not found:
            return "transformers (>= 4.48, with masking_utils) is not installed: the optional 'peers' extra"
        return None

    def encoder_attention_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        seq_len, sliding_window, padding_mask, device = validate_encoder_mask_args(
            seq_len, sliding_window, padding_mask, device
        )
        device = torch.device("cpu") if device is None else torch.device(device)
        hf = _masking_utils()
        mask_function = hf.causal_mask_function
        if sliding_window is not None:
            mask_function = hf.and_masks(hf.causal_mask_function, hf.sliding_window_overlay(sliding_window))
        mask = hf.sdpa_mask(
            batch_size=1 if padding_mask is None else padding_mask.shape[0],
            q_length=seq_len,
            kv_length=seq_len,
            mask_function=mask_function,
            attention_mask=None if padding_mask is None else padding_mask.to(device),
            allow_is_causal_skip=False,
            device=device,
        )
        return mask[0, 0] if padding_mask is None else mask


BACKEND = TransformersBackend()

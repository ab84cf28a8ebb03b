"""Masks (spec/masks.md) from ``transformers.masking_utils``, as HF models build them.

MASK-ENC: ``sdpa_mask`` with ``causal_mask_function``, ``and_masks(causal, sliding_window_overlay(W))``
for a window, the 2-D padding mask as ``attention_mask`` (a model's int or bool attention mask).
The padding mask goes in as HF's mask creation hands it on (``_preprocess_mask_arguments``: a 2-D
attention mask ``.to(device, torch.bool)``); the device defaults to the padding mask's. Nothing is
validated (MASK-ERRORS is expected to fail).
The Ascend decode mask and the window converters belong to other APIs.
"""

from __future__ import annotations

import torch

from backends import NotImplementedOp
from backends.transformers_peer._hf import hf_module


class TransformersMasks:
    """The mask ops of the ``transformers`` backend."""

    def encoder_attention_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        if device is None:
            device = "cpu" if padding_mask is None else padding_mask.device
        hf = hf_module("masking_utils")
        mask_function = hf.causal_mask_function
        if sliding_window is not None:
            mask_function = hf.and_masks(hf.causal_mask_function, hf.sliding_window_overlay(sliding_window))
        mask = hf.sdpa_mask(
            batch_size=1 if padding_mask is None else padding_mask.shape[0],
            q_length=seq_len,
            kv_length=seq_len,
            mask_function=mask_function,
            attention_mask=None if padding_mask is None else padding_mask.to(device, torch.bool),
            allow_is_causal_skip=False,
            device=torch.device(device),
        )
        return mask[0, 0] if padding_mask is None else mask

    swa_decode_mask = NotImplementedOp("the Ascend decode mask (MASK-SWA-DECODE) is an Ascend adapter's op")
    flash_attention_window = NotImplementedOp("a flash-attention kernel argument, not a transformers op")
    cann_prefill_tokens = NotImplementedOp("CANN kernel arguments: an Ascend adapter's op")
    decode_mask_window = NotImplementedOp("an Ascend decode-mask argument: an Ascend adapter's op")

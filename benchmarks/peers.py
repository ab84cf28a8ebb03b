"""Bench-only peer implementations: what the field did, measured next to the backends.

``sdpa-float-mask`` is the SANA NPU regression's shape of code: the same boolean mask as the
``native`` backend, turned into an additive float mask (0 / -inf, in the query's dtype) and
handed to ``F.scaled_dot_product_attention``. Its ratio to ``native`` (SDPA with the bool mask)
is the cost of the float mask. It follows the backend protocol, so the bench treats it like one.
Everything it needs from the masks family is imported lazily: without that code importable
it is a skip with the reason.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["PEERS", "SdpaFloatMask"]


class SdpaFloatMask:
    """SDPA with an additive float mask (0 / -inf in q's dtype) instead of a bool mask."""

    name = "sdpa-float-mask"

    def unavailable(self, device: torch.device) -> str | None:
        return None

    @staticmethod
    def _sdpa(q, k, v, allowed, scale):
        from reference.masks import additive_mask

        mask = additive_mask(allowed, q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        from backends.native import encoder_attention_mask

        allowed = encoder_attention_mask(
            q.shape[2], sliding_window=sliding_window, padding_mask=padding_mask, device=q.device
        )
        return self._sdpa(q, k, v, allowed, scale)

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        from backends.native import swa_decode_mask

        kv_len = k_cache.shape[2]
        window = kv_len if sliding_window is None else sliding_window
        allowed = ~swa_decode_mask(seq_lens, kv_len, window=window)[:, :, None, :]
        in_sequence = (torch.arange(kv_len, device=q.device) < seq_lens[:, None])[:, None, :, None]
        k_cache = k_cache.masked_fill(~in_sequence, 0.0)
        v_cache = v_cache.masked_fill(~in_sequence, 0.0)
        return self._sdpa(q, k_cache, v_cache, allowed, scale)


PEERS = (SdpaFloatMask(),)

"""Attention (spec/attention.md) through transformers' SDPA interface, as its decoder layers call it.

Each op calls ``integrations.sdpa_attention.sdpa_attention_forward(module, q, k, v, mask,
scaling=scale)`` with a real ``LlamaAttention`` as ``module`` (its ``num_key_value_groups`` and
``is_causal`` steer the GQA and causal paths), built from a config of the shapes, and turns the
``[B, S, H, D]`` result back into BNSD. The masks are ``masking_utils.sdpa_mask``'s, as
``create_causal_mask`` and ``create_sliding_window_causal_mask`` build them: ``attention``'s
boolean mask as given (broadcast to 4-D); prefill's causal (and sliding-window, ``local_size``)
mask with the padding mask as the 2-D attention mask (None, SDPA's ``is_causal``, where
transformers skips a plain causal mask); decode, sequence by sequence, the mask of a query at
position ``L - 1`` over the sequence's first ``L`` cache rows.
Nothing is validated (ATTN-ERRORS is expected to fail).
"""

from __future__ import annotations

import functools

import torch

from backends.transformers_peer._hf import hf_attr, hf_module


@functools.lru_cache(maxsize=64)
def _llama_attention(heads: int, kv_heads: int, head_dim: int):
    """A LlamaAttention of these head counts and head dim (only its attributes are read), built once."""
    config = hf_attr("models.llama.configuration_llama", "LlamaConfig")(
        hidden_size=heads * head_dim, head_dim=head_dim, num_attention_heads=heads,
        num_key_value_heads=kv_heads, num_hidden_layers=1, intermediate_size=1,
    )  # fmt: skip
    return hf_attr("models.llama.modeling_llama", "LlamaAttention")(config, layer_idx=0)


def _sdpa(q, k, v, mask, scale):
    forward = hf_attr("integrations.sdpa_attention", "sdpa_attention_forward")
    module = _llama_attention(q.shape[1], k.shape[1], q.shape[-1])
    out, _ = forward(module, q, k, v, mask, dropout=0.0, scaling=scale)
    return out.transpose(1, 2)


def _mask_function(sliding_window):
    """create_causal_mask's or create_sliding_window_causal_mask's mask function."""
    hf = hf_module("masking_utils")
    if sliding_window is None:
        return hf.causal_mask_function
    return hf.sliding_window_causal_mask_function(sliding_window)


class TransformersAttention:
    """The attention ops of the ``transformers`` backend."""

    def attention(self, q, k, v, *, allowed, scale):
        mask = allowed if allowed.dim() == 4 else allowed.reshape((1,) * (4 - allowed.dim()) + allowed.shape)
        return _sdpa(q, k, v, mask, scale)

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        batch, seq_len = q.shape[0], q.shape[2]
        mask = hf_module("masking_utils").sdpa_mask(
            batch_size=batch,
            q_length=seq_len,
            kv_length=seq_len,
            mask_function=_mask_function(sliding_window),
            attention_mask=None if padding_mask is None else padding_mask.to(q.device, torch.bool),
            local_size=sliding_window,  # as create_sliding_window_causal_mask passes it: no causal skip
            device=q.device,
        )
        return _sdpa(q, k, v, mask, scale)

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        # Sequence by sequence, over its first L cache rows: what a DynamicCache holds and hands the
        # attention (transformers keeps no cache rows past a sequence's length), with the mask
        # create_causal_mask / create_sliding_window_causal_mask give a query at position L - 1.
        out = []
        for b, length in enumerate(seq_lens.tolist()):
            mask = hf_module("masking_utils").sdpa_mask(
                batch_size=1,
                q_length=1,
                kv_length=length,
                q_offset=length - 1,
                mask_function=_mask_function(sliding_window),
                attention_mask=None,
                local_size=sliding_window,
                device=q.device,
            )
            k, v = k_cache[b : b + 1, :, :length], v_cache[b : b + 1, :, :length]
            out.append(_sdpa(q[b : b + 1], k, v, mask, scale))
        return torch.cat(out)

"""RMSNorm (spec/norms.md) computed by transformers' own modules.

``rms_norm`` is ``LlamaRMSNorm`` and ``gemma_rms_norm`` is ``Gemma3RMSNorm`` (``1 + weight``), each
with the given weight as its parameter, kept in its own dtype as a loaded checkpoint keeps it, and
the given eps. The fused forms are what a decoder layer computes (``LlamaDecoderLayer.forward``:
``hidden_states = residual + hidden_states``, then the next layer norm): the sum in PyTorch's
promotion, then the module on it; they return ``(normed, sum)``. Nothing is validated.
"""

from __future__ import annotations

import torch

from backends.transformers_peer._hf import hf_attr

LLAMA = ("models.llama.modeling_llama", "LlamaRMSNorm")
GEMMA3 = ("models.gemma3.modeling_gemma3", "Gemma3RMSNorm")


def _norm(where: tuple[str, str], x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    module = hf_attr(*where)(weight.shape[0], eps=eps)
    module.weight = torch.nn.Parameter(weight.detach(), requires_grad=False)
    return module(x)


class TransformersNorms:
    """The norm ops of the ``transformers`` backend."""

    def rms_norm(self, x, weight, *, eps):
        return _norm(LLAMA, x, weight, eps)

    def gemma_rms_norm(self, x, weight, *, eps):
        return _norm(GEMMA3, x, weight, eps)

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        total = residual + x  # LlamaDecoderLayer.forward: hidden_states = residual + hidden_states
        return _norm(LLAMA, total, weight, eps), total

    def gemma_fused_add_rms_norm(self, x, residual, weight, *, eps):
        total = residual + x  # Gemma3DecoderLayer.forward: the same sum before the next norm
        return _norm(GEMMA3, total, weight, eps), total

"""Mask and attention mutants: the field's window, polarity, dtype and scale bugs (spec/masks.md, Sources)."""

from __future__ import annotations

import torch

from backends import native
from backends.native import NativeBackend
from backends.npu import AscendBackend, emulator_unavailable, fia_heads, load_emulator
from mutants import named
from mutants._attention_ranges import BACKENDS as RANGE_BACKENDS
from reference import attention as attention_oracle
from reference import masks as mask_oracle

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_masks", "conformance.test_attention"]


class _WrongAscend(AscendBackend):
    def __init__(self, name: str):
        super().__init__(name, load_emulator, emulator_unavailable)


class _WrongNative(NativeBackend):
    """Native with its own encoder mask (``wrong_mask``, after the contract's argument checks),
    which prefill also uses: each subclass differs from the contract only by its bug."""

    def encoder_attention_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        seq_len, sliding_window, padding_mask, device = mask_oracle.validate_encoder_mask_args(
            seq_len, sliding_window, padding_mask, device
        )
        return self.wrong_mask(
            seq_len, sliding_window=sliding_window, padding_mask=padding_mask, device=device
        )

    def wrong_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        raise NotImplementedError

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        _, seq_len, sliding_window, padding_mask = attention_oracle.validate_prefill_args(
            q, k, v, sliding_window=sliding_window, padding_mask=padding_mask
        )
        allowed = self.encoder_attention_mask(
            seq_len, sliding_window=sliding_window, padding_mask=padding_mask, device=q.device
        )
        return native.attention(q, k, v, allowed=allowed, scale=scale)


class WindowOnFutureSide(_WrongNative):
    """The window removes keys j - i > W, which causality already removed: a no-op.

    Origin: the Gemma2 encoder on NPU (spec/masks.md, MASK-ENC); invisible while S <= W.
    Caught by: ATTN-PREFILL, MASK-ENC.
    """

    clauses = {"MASK-ENC", "ATTN-PREFILL"}

    def wrong_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        causal = native.encoder_attention_mask(seq_len, padding_mask=padding_mask, device=device)
        if sliding_window is None:
            return causal
        position = torch.arange(seq_len, device=causal.device)
        distance = position[None, :] - position[:, None]  # j - i
        return causal & ~(distance > sliding_window)


class PreTokensEqualsWindow(_WrongAscend):
    """FIA prefill with pre_tokens = W: W + 1 keys, one more than decode and HF.

    Origin: the Step-3.5 Ascend prefill (spec/masks.md, WINDOW-CONV).
    Caught by: ATTN-PREFILL, PREFILL-DECODE, WINDOW-CONV.
    """

    clauses = {"WINDOW-CONV", "ATTN-PREFILL", "PREFILL-DECODE"}

    def cann_prefill_tokens(self, sliding_window):
        sliding_window = mask_oracle.require_window(sliding_window)
        if sliding_window is None:
            return {"pre_tokens": mask_oracle.CANN_MAX_TOKENS, "next_tokens": 0}
        return {"pre_tokens": sliding_window, "next_tokens": 0}


class DecodeReliesOnPreTokens(_WrongAscend):
    """Decode passes sparse_mode=4 and pre_tokens = W - 1 but no explicit mask: for query
    length 1 FIA ignores both, so the window is lost at decode.

    Origin: the Step-3.5 decode path before the fix (spec/ascend.md, CANN-FIA-DECODE).
    Caught by: ATTN-DECODE, PREFILL-DECODE.
    """

    clauses = {"ATTN-DECODE", "PREFILL-DECODE"}

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        attention_oracle.validate_decode_args(q, k_cache, v_cache, seq_lens, sliding_window=sliding_window)
        tokens = self.cann_prefill_tokens(sliding_window)
        return self.fia(
            q, k_cache, v_cache, scale=scale, sparse_mode=4, atten_mask=None,
            actual_seq_lengths_kv=seq_lens.tolist(), **tokens,
        )  # fmt: skip


class DecodeMaskPolarityInverted(_WrongAscend):
    """The decode mask built with the SDPA polarity (True = visible) and handed to FIA.

    Origin: the two mask polarities (spec/ascend.md, CANN-FIA-MASK).
    Caught by: ATTN-DECODE, MASK-SWA-DECODE.
    """

    clauses = {"MASK-SWA-DECODE", "ATTN-DECODE"}

    def swa_decode_mask(self, seq_lens, kv_len, *, window):
        return ~native.swa_decode_mask(seq_lens, kv_len, window=window)


class Float32AdditiveMask(_WrongNative):
    """The encoder mask as a float32 0/-inf additive mask, whatever the query dtype.

    Origin: the SANA Gemma2 encoder on NPU (spec/masks.md, MASK-DTYPE).
    Caught by: MASK-DTYPE, ATTN-FLOAT-MASK-REJECT (SHOULD: its attention takes any float mask).
    """

    clauses = {"MASK-DTYPE", "ATTN-FLOAT-MASK-REJECT"}

    def wrong_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        allowed = native.encoder_attention_mask(
            seq_len, sliding_window=sliding_window, padding_mask=padding_mask, device=device
        )
        return torch.zeros(allowed.shape, device=allowed.device).masked_fill(~allowed, float("-inf"))

    def attention(self, q, k, v, *, allowed, scale):
        import torch.nn.functional as F

        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)


class PaddingOnQueries(_WrongNative):
    """The padding mask applied to query rows instead of key columns.

    Origin: a [B, 1, S, 1] broadcast where [B, 1, 1, S] was meant.
    Caught by: ATTN-PREFILL, MASK-ENC.
    """

    clauses = {"MASK-ENC", "ATTN-PREFILL"}

    def wrong_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        allowed = native.encoder_attention_mask(seq_len, sliding_window=sliding_window, device=device)
        if padding_mask is None:
            return allowed
        padding_mask = mask_oracle.validate_padding_mask(padding_mask, seq_len)
        return allowed[None, None] & padding_mask.to(allowed.device)[:, None, :, None]


class ScaleLeftAtOpDefault(_WrongAscend):
    """FIA called without scale: the op default 1.0 instead of 1/sqrt(D).

    Origin: FIA's documented default (spec/ascend.md, CANN-FIA).
    Caught by: ATTN-DECODE, ATTN-PREFILL, ATTN-SCALE.
    """

    clauses = {"ATTN-SCALE", "ATTN-PREFILL", "ATTN-DECODE"}

    def fia(self, q, k, v, *, scale, **options):
        return self.ops.npu_fused_infer_attention_score(q, k, v, **fia_heads(q, k), **options)[0]


class WindowOneShort(_WrongNative):
    """The window keeps W - 1 keys: i - j < W - 1, the other off-by-one direction.

    Origin: FlashAttention's left = W - 1 applied as an exclusive bound (j > i - left).
    Caught by: ATTN-PREFILL, MASK-ENC.
    """

    clauses = {"MASK-ENC", "ATTN-PREFILL"}

    def wrong_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        shorter = None if sliding_window is None else sliding_window - 1
        if shorter == 0:  # W = 1 would become "no window"; keep the bug: the query loses itself
            allowed = native.encoder_attention_mask(seq_len, padding_mask=padding_mask, device=device)
            return allowed & False
        return native.encoder_attention_mask(
            seq_len, sliding_window=shorter, padding_mask=padding_mask, device=device
        )


class GqaHeadsTiled(NativeBackend):
    """GQA with the key/value heads tiled (repeat) instead of interleaved (repeat_interleave):
    query head h reads kv head h % Hkv instead of h // (Hq / Hkv).

    Origin: expanding k/v with Tensor.repeat before a kernel without native GQA support.
    Caught by: ATTN.
    """

    clauses = {"ATTN"}

    def attention(self, q, k, v, *, allowed, scale):
        group = q.shape[1] // k.shape[1]
        return native.attention(
            q, k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1), allowed=allowed, scale=scale
        )


class AttentionInBfloat16(NativeBackend):
    """Scores, softmax and the weighted sum computed in bfloat16 whatever the input dtype.

    Origin: a fused kernel with a bf16-only path fed float32 activations.
    Caught by: ATTN.
    """

    clauses = {"ATTN"}

    def attention(self, q, k, v, *, allowed, scale):
        low = [t.to(torch.bfloat16) for t in (q, k, v)]
        if allowed.dtype != torch.bool:
            allowed = allowed.to(torch.bfloat16)
        return native.attention(*low, allowed=allowed, scale=scale).to(q.dtype)


class DecodeReadsStaleRows(NativeBackend):
    """Decode attends to the whole cache: rows at or beyond L (stale or unwritten) are read.

    Origin: a decode path that passes the cache's capacity instead of actual_seq_lengths_kv.
    Caught by: ATTN-DECODE.
    """

    clauses = {"ATTN-DECODE"}

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        attention_oracle.validate_decode_args(q, k_cache, v_cache, seq_lens, sliding_window=sliding_window)
        full = torch.full_like(seq_lens, k_cache.shape[2])
        allowed = ~native.swa_decode_mask(full, k_cache.shape[2], window=sliding_window or k_cache.shape[2])
        return native.attention(q, k_cache, v_cache, allowed=allowed[:, :, None, :], scale=scale)


class NanRowsSwallowed(NativeBackend):
    """Prefill's softmax guards its empty rows with ``where(total > 0, w / total, 0)``: a NaN total
    is not > 0, so a NaN in a visible query or key turns the row into zeros instead of NaN.

    Origin: the fully-masked-row guard of hand-written attention kernels (and of this suite's own
    oracle before ATTN-NAN): right for every finite input, it hides the NaN a model produced.
    Caught by: ATTN-NAN.
    """

    clauses = {"ATTN-NAN"}

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        _, seq_len, sliding_window, padding_mask = attention_oracle.validate_prefill_args(
            q, k, v, sliding_window=sliding_window, padding_mask=padding_mask
        )
        allowed = native.encoder_attention_mask(
            seq_len, sliding_window=sliding_window, padding_mask=padding_mask, device=q.device
        )
        group = q.shape[1] // k.shape[1]
        k, v = (t.float().repeat_interleave(group, dim=1) for t in (k, v))
        scores = (q.float() @ k.transpose(-1, -2) * scale).masked_fill(~allowed, float("-inf"))
        weights = torch.exp(scores - scores.amax(-1, keepdim=True).clamp_min(torch.finfo(torch.float32).min))
        total = weights.sum(-1, keepdim=True)
        return (torch.where(total > 0, weights / total, 0.0) @ v).to(q.dtype)


BACKENDS = [
    named(WindowOnFutureSide, "wrong-window-on-future-side"),
    named(PreTokensEqualsWindow, "wrong-pre-tokens-equals-window"),
    named(DecodeReliesOnPreTokens, "wrong-decode-relies-on-pre-tokens"),
    named(DecodeMaskPolarityInverted, "wrong-decode-mask-polarity-inverted"),
    named(Float32AdditiveMask, "wrong-float32-additive-mask"),
    named(PaddingOnQueries, "wrong-padding-on-queries"),
    named(ScaleLeftAtOpDefault, "wrong-scale-left-at-op-default"),
    named(WindowOneShort, "wrong-window-one-short"),
    named(GqaHeadsTiled, "wrong-gqa-heads-tiled"),
    named(AttentionInBfloat16, "wrong-attention-in-bfloat16"),
    named(DecodeReadsStaleRows, "wrong-decode-reads-stale-rows"),
    named(NanRowsSwallowed, "wrong-nan-rows-swallowed"),
]


class AttentionScaleFromHeadDim(NativeBackend):
    """The scale passed is ignored: prefill and decode use 1/sqrt(D) of the q they were given.

    Origin: an adapter that fills the kernel's softmax_scale from the head dim; right for a plain
    model, wrong for MLA's absorbed decode and YaRN's mscale^2 (spec/attention.md, ATTN-SCALE).
    Caught by: ATTN-SCALE, ATTN-PREFILL, ATTN-DECODE.
    """

    clauses = {"ATTN-SCALE", "ATTN-PREFILL", "ATTN-DECODE"}

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        attention_oracle.require_scale(scale)
        return super().prefill_attention(
            q, k, v, sliding_window=sliding_window, padding_mask=padding_mask, scale=q.shape[-1] ** -0.5
        )

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        attention_oracle.require_scale(scale)
        return super().decode_attention(
            q, k_cache, v_cache, seq_lens, sliding_window=sliding_window, scale=q.shape[-1] ** -0.5
        )


class AttentionViewsReadAsContiguous(NativeBackend):
    """q, k, v read from their data pointers as if contiguous [B, H, S, D]: the transposed head
    slices of a fused [B, S, H, D] projection are read with heads and positions mixed.

    Origin: a custom kernel taking ``q.data_ptr()`` with computed strides; right for every fresh
    test tensor, wrong for HF's ``.view(B, S, H, D).transpose(1, 2)`` (spec/attention.md, Shapes).
    Caught by: ATTN, ATTN-PREFILL, ATTN-DECODE.
    """

    clauses = {"ATTN", "ATTN-PREFILL", "ATTN-DECODE"}

    @staticmethod
    def _read(*tensors):
        return [t.as_strided(t.shape, torch.empty(t.shape, device="meta").stride(), t.storage_offset())
                for t in tensors]  # fmt: skip

    def attention(self, q, k, v, *, allowed, scale):
        return super().attention(*self._read(q, k, v), allowed=allowed, scale=scale)

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        return super().prefill_attention(
            *self._read(q, k, v), sliding_window=sliding_window, padding_mask=padding_mask, scale=scale
        )

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        q, k_cache, v_cache = self._read(q, k_cache, v_cache)
        return super().decode_attention(
            q, k_cache, v_cache, seq_lens, sliding_window=sliding_window, scale=scale
        )


BACKENDS += [
    named(AttentionScaleFromHeadDim, "wrong-attention-scale-from-head-dim"),
    named(AttentionViewsReadAsContiguous, "wrong-attention-views-read-as-contiguous"),
]
BACKENDS += RANGE_BACKENDS  # an output dtype the checks once discarded (spec/attention.md, Ranges)

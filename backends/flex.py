"""The ``flex`` and ``flex-compiled`` backends: FlexAttention (``torch.nn.attention.flex_attention``).

Masks are one ``mask_mod`` (True = attend, like SDPA), turned into a ``BlockMask`` by
``create_block_mask`` on the test's device (passed explicitly: its default is "cuda") or into
a dense bool mask by ``create_mask``. ``flex`` runs ``flex_attention`` eagerly; ``flex-compiled``
runs it through ``torch.compile(dynamic=True)``. Neither implements the free-form
``attention`` op (a [B, H, Sq, Sk] lookup mask_mod is slow in eager FlexAttention and adds
nothing the window mask_mod does not test). To keep compiles per dtype, not per example:
- one ``mask_mod`` code object serves prefill and decode; every per-example value (query
  positions, key validity, the window) is a captured tensor, never a Python constant;
- a query or key length of 1 (decode; prefill of one token) is padded to 2 (a copied query
  row, an invalid key), because length 1 is a separate specialization of the compiled kernel.
torch is imported normally; flex_attention is imported lazily so a torch without it is a skip.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from backends import NotImplementedOp
from backends._toolchain import compile_unavailable
from reference.attention import require_scale, validate_decode_args, validate_prefill_args
from reference.masks import validate_encoder_mask_args


def _flex():
    from torch.nn.attention import flex_attention as module

    return module


def window_mask_mod(query_pos: torch.Tensor, key_valid: torch.Tensor, window: torch.Tensor):
    """mask_mod of MASK-ENC for queries at absolute positions query_pos[b, q] (True = attend).

    Keys j with j <= pos, pos - j < window (MASK-ENC's i - j < W), and key_valid[b, j].
    """

    def mask_mod(b, h, q_idx, kv_idx):
        position = query_pos[b, q_idx]
        return (kv_idx <= position) & (position - kv_idx < window) & key_valid[b, kv_idx]

    return mask_mod


def _window_tensor(sliding_window: int | None, kv_len: int, device) -> torch.Tensor:
    return torch.tensor(kv_len + 1 if sliding_window is None else sliding_window, device=device)


@functools.cache
def _compiled_flex_attention():
    return torch.compile(_flex().flex_attention, dynamic=True)


class FlexBackend:
    def __init__(self, name: str, *, compiled: bool):
        self.name = name
        self.compiled = compiled

    def unavailable(self, device: torch.device) -> str | None:
        if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
            return "this torch has no torch.nn.attention.flex_attention"
        if not self.compiled:
            return None
        return compile_unavailable(device, what="compiled FlexAttention")

    attention = NotImplementedOp(
        "a [B, H, Sq, Sk] lookup mask_mod is slow in eager FlexAttention and adds nothing the window "
        "mask_mod of prefill and decode does not test"
    )

    # MASK-ENC through create_mask of the same mask_mod the attention uses.
    def encoder_attention_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        seq_len, sliding_window, padding_mask, device = validate_encoder_mask_args(
            seq_len, sliding_window, padding_mask, device
        )
        device = torch.device("cpu") if device is None else torch.device(device)
        key_valid = (
            torch.ones(1, seq_len, dtype=torch.bool, device=device)
            if padding_mask is None
            else padding_mask.to(device)
        )
        query_pos = torch.arange(seq_len, device=device).expand(key_valid.shape[0], seq_len)
        mask_mod = window_mask_mod(query_pos, key_valid, _window_tensor(sliding_window, seq_len, device))
        dense = _flex().create_mask(mask_mod, key_valid.shape[0], None, seq_len, seq_len, device=device)
        return dense[0, 0] if padding_mask is None else dense

    def _run(self, q, k, v, query_pos, key_valid, window, *, scale):
        """flex_attention of window_mask_mod. Compiled: lengths of 1 are padded to 2 (a copied
        query row, an invalid zero key), since length 1 is a separate kernel specialization."""
        flex = _flex()
        q_len, kv_len = q.shape[2], k.shape[2]
        if self.compiled and q_len == 1:
            q, query_pos = q.expand(-1, -1, 2, -1).contiguous(), query_pos.expand(-1, 2)
        if self.compiled and kv_len == 1:
            k, v = (torch.cat([t, torch.zeros_like(t)], dim=2) for t in (k, v))
            key_valid = torch.cat([key_valid, torch.zeros_like(key_valid)], dim=1)
        q_heads = q.shape[1]
        if self.compiled and k.shape[1] == 1:
            # torch 2.13 inductor emits C++ that does not compile for a single k/v head on CPU
            # (CppCompileError: 'cur_kvSplitSize8' was not declared): duplicate all heads, which
            # keeps the GQA mapping (query heads Hq..2Hq-1 read the copy), and drop the copy.
            q, k, v = (torch.cat([t, t], dim=1) for t in (q, k, v))
        mask_mod = window_mask_mod(query_pos.contiguous(), key_valid.contiguous(), window)
        block_mask = flex.create_block_mask(
            mask_mod, q.shape[0], None, q.shape[2], k.shape[2], device=q.device
        )
        run = _compiled_flex_attention() if self.compiled else flex.flex_attention
        return run(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True)[:, :q_heads, :q_len]

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        batch, q_len, sliding_window, padding_mask = validate_prefill_args(
            q, k, v, sliding_window=sliding_window, padding_mask=padding_mask
        )
        scale = require_scale(scale)
        if padding_mask is None:
            key_valid = torch.ones(batch, q_len, dtype=torch.bool, device=q.device)
        else:
            key_valid = padding_mask.to(q.device)
        query_pos = torch.arange(q_len, device=q.device).expand(batch, q_len)
        window = _window_tensor(sliding_window, q_len, q.device)
        return self._run(q, k, v, query_pos, key_valid, window, scale=scale)

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        seq_lens, sliding_window = validate_decode_args(
            q, k_cache, v_cache, seq_lens, sliding_window=sliding_window
        )
        scale = require_scale(scale)
        kv_len, seq_lens = k_cache.shape[2], seq_lens.to(q.device)
        key_valid = torch.arange(kv_len, device=q.device)[None, :] < seq_lens[:, None]
        # Stale rows are excluded by the mask, but a masked NaN still poisons the matmul.
        k_cache = k_cache.masked_fill(~key_valid[:, None, :, None], 0.0)
        v_cache = v_cache.masked_fill(~key_valid[:, None, :, None], 0.0)
        query_pos = (seq_lens - 1)[:, None]
        window = _window_tensor(sliding_window, kv_len, q.device)
        return self._run(q, k_cache, v_cache, query_pos, key_valid, window, scale=scale)


class FlexCompiledBackend(FlexBackend):
    """Compiled prefill and decode only: its masks would be the eager backend's (create_mask is
    not compiled)."""

    encoder_attention_mask = NotImplementedOp(
        "flex-compiled compiles prefill and decode only; its mask would be flex's "
        "(create_mask is not compiled)"
    )


BACKEND = FlexBackend("flex", compiled=False)
COMPILED = FlexCompiledBackend("flex-compiled", compiled=True)

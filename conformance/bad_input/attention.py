"""ATTN-ERRORS' bad inputs (spec/attention.md) as records."""

from __future__ import annotations

import torch

from conformance.bad_input import ErrorCase, names


def _qkv(device, *, batch=1, q_heads=2, kv_heads=1, q_len=4, kv_len=4, head_dim=16, dtype=torch.float32):
    q = torch.randn(batch, q_heads, q_len, head_dim, device=device, dtype=dtype)
    kv = torch.randn(batch, kv_heads, kv_len, head_dim, device=device, dtype=dtype)
    return q, kv, kv.clone()


def _prefill(tensors=_qkv, **overrides):
    """prefill_attention(q, k, v, sliding_window=None, padding_mask=None, scale=0.25, **overrides);
    ``tensors(device)`` gives q, k, v and callable overrides are built on the device."""

    def build(d):
        options = {"sliding_window": None, "padding_mask": None, "scale": 0.25}
        options.update({k: v(d) if callable(v) else v for k, v in overrides.items()})
        return tensors(d), options

    return build


def _decode(seq_lens=(3,), q_len=1, **overrides):
    """decode_attention(q, k, v, seq_lens, sliding_window=None, scale=0.25, **overrides)."""

    def build(d):
        lengths = torch.tensor(list(seq_lens), device=d)
        return (*_qkv(d, q_len=q_len), lengths), {"sliding_window": None, "scale": 0.25, **overrides}

    return build


def _attention(op: str, name: str, build, *arguments: str) -> ErrorCase:
    return ErrorCase("ATTN-ERRORS", op, name, build, ValueError, names(*arguments))


QKV = ("q", "k", "v")
ERRORS = [
    _attention(
        "prefill_attention", "heads-not-multiple", _prefill(lambda d: _qkv(d, q_heads=3, kv_heads=2)), *QKV
    ),
    _attention(
        "prefill_attention",
        "q-3d",
        _prefill(lambda d: (torch.ones(2, 4, 16, device=d), *_qkv(d)[1:])),
        "q",
    ),
    _attention(
        "prefill_attention",
        "head-dim-mismatch",
        _prefill(lambda d: (_qkv(d)[0], *_qkv(d, head_dim=8)[1:])),
        *QKV,
    ),
    _attention(
        "prefill_attention", "batch-mismatch", _prefill(lambda d: (_qkv(d)[0], *_qkv(d, batch=2)[1:])), *QKV
    ),
    _attention("prefill_attention", "lengths-differ", _prefill(lambda d: _qkv(d, q_len=3)), *QKV),
    _attention(
        "prefill_attention",
        "dtypes-differ",
        _prefill(lambda d: (_qkv(d, dtype=torch.float16)[0], *_qkv(d)[1:])),
        "k",
    ),
    _attention("prefill_attention", "window-zero", _prefill(sliding_window=0), "sliding_window"),
    _attention(
        "prefill_attention",
        "padding-float",
        _prefill(padding_mask=lambda d: torch.ones(1, 4, device=d)),
        "padding_mask",
    ),
    _attention("prefill_attention", "scale-zero", _prefill(scale=0.0), "scale"),
    _attention("decode_attention", "q-len-2", _decode((2,), q_len=2), "q"),
    _attention("decode_attention", "length-zero", _decode((0,)), "seq_lens"),
    _attention("decode_attention", "length-over-kv", _decode((5,)), "seq_lens"),
    _attention("decode_attention", "lengths-float", _decode((2.0,)), "seq_lens"),
    _attention("decode_attention", "window-zero", _decode(sliding_window=0), "sliding_window"),
]

"""MASK-ERRORS' bad inputs (spec/masks.md) as records."""

from __future__ import annotations

import torch

from conformance.bad_input import ErrorCase, names


def _mask(op: str, name: str, build, argument: str) -> ErrorCase:
    return ErrorCase("MASK-ERRORS", op, name, build, ValueError, names(argument))


def _encoder(seq_len, *, on_device: bool = True, padding=None, **options):
    """encoder_attention_mask(seq_len, ...); ``padding(device)`` builds the padding mask."""

    def build(d):
        kwargs = dict(options)
        if padding is not None:
            kwargs["padding_mask"] = padding(d)
        if on_device:
            kwargs["device"] = d
        return (seq_len,), kwargs

    return build


def _swa_decode(lengths, kv_len=4, window=2, *, as_tensor: bool = True, dtype=None):
    return lambda d: (
        (torch.tensor(lengths, dtype=dtype, device=d) if as_tensor else lengths, kv_len),
        {"window": window},
    )


ERRORS = [
    _mask("encoder_attention_mask", "seq-len-zero", _encoder(0), "seq_len"),
    _mask("encoder_attention_mask", "seq-len-float", _encoder(3.0), "seq_len"),
    _mask("encoder_attention_mask", "window-zero", _encoder(4, sliding_window=0), "sliding_window"),
    _mask(
        "encoder_attention_mask",
        "padding-float",
        _encoder(4, padding=lambda d: torch.ones(2, 4, device=d)),
        "padding_mask",
    ),
    _mask(
        "encoder_attention_mask",
        "padding-wrong-length",
        _encoder(4, on_device=False, padding=lambda d: torch.ones(2, 5, dtype=torch.bool, device=d)),
        "padding_mask",
    ),
    _mask(
        "encoder_attention_mask",
        "padding-1d",
        _encoder(4, on_device=False, padding=lambda d: torch.ones(4, dtype=torch.bool, device=d)),
        "padding_mask",
    ),
    _mask(
        "encoder_attention_mask",
        "padding-not-0-1",
        _encoder(3, on_device=False, padding=lambda d: torch.tensor([[1, 2, 0]], device=d)),
        "padding_mask",
    ),
    _mask("swa_decode_mask", "window-zero", _swa_decode([2], window=0), "window"),
    _mask("swa_decode_mask", "length-zero", _swa_decode([0]), "seq_lens"),
    _mask("swa_decode_mask", "length-over-kv", _swa_decode([5]), "seq_lens"),
    _mask("swa_decode_mask", "lengths-2d", _swa_decode([[2]]), "seq_lens"),
    _mask("swa_decode_mask", "lengths-float", _swa_decode([2.0]), "seq_lens"),
    _mask("swa_decode_mask", "lengths-list", _swa_decode([2], as_tensor=False), "seq_lens"),
]

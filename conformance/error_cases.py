"""Bad inputs as records (OpInfo style): one record per bad input, shared by the oracles' self-tests
(tests/test_reference_*.py) and the conformance properties (conformance/test_*.py).

A record names the clause (ACT-ERRORS, MASK-ERRORS, ATTN-ERRORS), the op, how to build the call's
arguments on a device, the exception type the clause demands, and ``match``: a regex on the
argument's name, which each of these clauses says the message names. The oracle must raise
``exception`` with a message matching ``match``; so must every backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from conformance.checks import check_raises, describe

Arguments = tuple[tuple, dict]


@dataclass(frozen=True)
class ErrorCase:
    """``op(*args, **kwargs)`` with ``build(device) -> (args, kwargs)`` raises ``exception`` whose
    message matches ``match`` (clause ``clause``)."""

    clause: str
    op: str
    name: str
    build: Callable[[torch.device | str], Arguments]
    exception: type[Exception]
    match: str

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"

    def bad_input(self, device: torch.device | str = "cpu") -> str:
        """The bad argument(s) as ``name=value`` (those whose name ``match`` names; all of them when
        none does), e.g. ``approximate='erf'``: what a failure message shows, not the record's id."""
        from conformance.signatures import protocol_signature

        args, kwargs = self.build(device)
        names = [p.name for p in protocol_signature(self.op)[1].parameters.values()]
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        bad = {k: v for k, v in given.items() if re.search(self.match, k)} or given
        return ", ".join(f"{k}={_shown(v)}" for k, v in bad.items())

    def call(self, impl, device: torch.device | str = "cpu"):
        """Call ``impl.op`` (an oracle module or a backend) on this bad input built on ``device``."""
        args, kwargs = self.build(device)
        return getattr(impl, self.op)(*args, **kwargs)


def _shown(value) -> str:
    """A value as a message shows it: small integer tensors by their values, others by shape/dtype."""
    if not isinstance(value, torch.Tensor):
        return f"{value!r:.80}"
    if not value.is_floating_point() and not value.is_complex() and value.numel() <= 16:
        return f"tensor({value.tolist()}, dtype={value.dtype})"
    return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype})"


def names(*arguments: str) -> str:
    """A regex matching any of ``arguments`` as a whole name (``x`` in ``x.shape[-1]``, not in ``max``)."""
    return "|".join(rf"(?<![\w.]){re.escape(a)}(?!\w)" for a in arguments)


# ACT-ERRORS ------------------------------------------------------------------------------------


def _gated(shape, dtype=torch.float32, **options) -> Callable[[torch.device | str], Arguments]:
    return lambda d: ((torch.ones(shape, dtype=dtype, device=d),), options)


def _activation(op: str, name: str, build, exception: type[Exception], argument: str) -> ErrorCase:
    return ErrorCase("ACT-ERRORS", op, name, build, exception, names(argument))


_NONE = {"approximate": "none"}
ACTIVATION_ERRORS = [
    _activation("gelu_and_mul", "odd-last-dim", _gated((2, 5), **_NONE), ValueError, "x"),
    _activation("gelu_and_mul", "zero-dim", _gated((), **_NONE), ValueError, "x"),
    _activation("gelu_and_mul", "integer-dtype", _gated((2, 4), torch.int64, **_NONE), TypeError, "x"),
    _activation(
        "gelu_and_mul", "bad-approximate", _gated((2, 4), approximate="erf"), ValueError, "approximate"
    ),
    _activation("silu_and_mul", "odd-last-dim", _gated((3,)), ValueError, "x"),
    _activation("silu_and_mul", "zero-dim", _gated(()), ValueError, "x"),
    _activation("silu_and_mul", "integer-dtype", _gated((4,), torch.int32), TypeError, "x"),
    _activation("swiglu_step_and_mul", "odd-last-dim", _gated((2, 7), limit=7.0), ValueError, "x"),
    _activation(
        "swiglu_step_and_mul", "integer-dtype", _gated((2, 4), torch.int64, limit=7.0), TypeError, "x"
    ),
    *(
        _activation("swiglu_step_and_mul", f"limit-{label}", _gated((2, 4), limit=limit), ValueError, "limit")
        for label, limit in (("zero", 0.0), ("negative", -1.0), ("inf", float("inf")), ("nan", float("nan")))
    ),
    # ACT-ERRORS: an integer limit (a config's 3) is a number; a bool is not.
    _activation("swiglu_step_and_mul", "limit-bool", _gated((2, 4), limit=True), ValueError, "limit"),
]

# ACT-ERRORS for the clamped look-alikes and the limit's selection (spec/activations.md).
_OAI = {"alpha": 1.702, "limit": 7.0, "interleaved": True}


def _config(config, layer_idx=0, shared=False) -> Callable[[torch.device | str], Arguments]:
    return lambda d: ((config, layer_idx), {"shared": shared})


ACTIVATION_ERRORS += [
    _activation("silu_clamped_and_mul", "odd-last-dim", _gated((2, 7), limit=7.0), ValueError, "x"),
    _activation(
        "silu_clamped_and_mul", "integer-dtype", _gated((2, 4), torch.int64, limit=7.0), TypeError, "x"
    ),
    *(
        _activation(
            "silu_clamped_and_mul", f"limit-{label}", _gated((2, 4), limit=limit), ValueError, "limit"
        )
        for label, limit in (("zero", 0.0), ("negative", -1.0), ("inf", float("inf")), ("nan", float("nan")))
    ),
    _activation("swiglu_oai_and_mul", "odd-last-dim", _gated((2, 7), **_OAI), ValueError, "x"),
    _activation("swiglu_oai_and_mul", "zero-dim", _gated((), **_OAI), ValueError, "x"),
    _activation("swiglu_oai_and_mul", "integer-dtype", _gated((2, 4), torch.int64, **_OAI), TypeError, "x"),
    _activation(
        "swiglu_oai_and_mul", "limit-negative", _gated((2, 4), **{**_OAI, "limit": -7.0}), ValueError, "limit"
    ),
    _activation(
        "swiglu_oai_and_mul", "alpha-zero", _gated((2, 4), **{**_OAI, "alpha": 0.0}), ValueError, "alpha"
    ),
    _activation(
        "swiglu_oai_and_mul",
        "alpha-nan",
        _gated((2, 4), **{**_OAI, "alpha": float("nan")}),
        ValueError,
        "alpha",
    ),
    _activation(
        "swiglu_oai_and_mul",
        "interleaved-int",
        _gated((2, 4), **{**_OAI, "interleaved": 1}),
        TypeError,
        "interleaved",
    ),
    _activation("swiglu_limit", "config-list", _config([7.0]), TypeError, "config"),
    _activation("swiglu_limit", "layer-negative", _config({}, -1), ValueError, "layer_idx"),
    _activation("swiglu_limit", "layer-float", _config({}, 1.0), ValueError, "layer_idx"),
    _activation("swiglu_limit", "shared-none", _config({}, 0, None), TypeError, "shared"),
    _activation(
        "swiglu_limit", "value-nan", _config({"swiglu_limits": [float("nan")]}), ValueError, "config"
    ),
    _activation(
        "swiglu_limit", "value-str", _config({"swiglu_limits_shared": ["7"]}, 0, True), ValueError, "config"
    ),
    _activation("swiglu_limit", "value-bool", _config({"swiglu_limits": [True]}), ValueError, "config"),
    *(
        _activation(op, "integer-dtype", _gated((2, 3), torch.int32), TypeError, "x")
        for op in ("new_gelu", "fast_gelu", "quick_gelu")
    ),
]

# ACT-ERRORS for SiTU (ACT-SITU): beta a finite number > 0, linear_beta None or one.
_SITU = {"beta": 4.0, "linear_beta": 25.0}
ACTIVATION_ERRORS += [
    _activation("situ_and_mul", "odd-last-dim", _gated((2, 7), **_SITU), ValueError, "x"),
    _activation("situ_and_mul", "integer-dtype", _gated((2, 4), torch.int64, **_SITU), TypeError, "x"),
    *(
        _activation(
            "situ_and_mul", f"beta-{label}", _gated((2, 4), **{**_SITU, "beta": v}), ValueError, "beta"
        )
        for label, v in (("zero", 0.0), ("negative", -4.0), ("inf", float("inf")), ("none", None))
    ),
    *(
        _activation(
            "situ_and_mul",
            f"linear-beta-{label}",
            _gated((2, 4), **{**_SITU, "linear_beta": v}),
            ValueError,
            "linear_beta",
        )
        for label, v in (("zero", 0.0), ("negative", -25.0), ("nan", float("nan")))
    ),
]


# MASK-ERRORS -----------------------------------------------------------------------------------


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


MASK_ERRORS = [
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


# ATTN-ERRORS -----------------------------------------------------------------------------------


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
ATTENTION_ERRORS = [
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


def params(cases: list[ErrorCase]) -> list:
    """pytest params, one per record: id ``op-name``, marked with the op (for the not-implemented skip)."""
    return [pytest.param(case, marks=pytest.mark.op(case.op), id=case.id) for case in cases]


def check_backend_raises(case: ErrorCase, backend, device) -> None:
    """The backend raises the record's exception type with a message matching the record's regex."""
    check_raises(
        case.exception,
        lambda: case.call(backend, device),
        clause=case.clause,
        match=case.match,
        context=f"{describe(backend, device, case.op)}: bad input {case.bad_input(device)}",
    )


# NORM-ERRORS -----------------------------------------------------------------------------------


def _norm_call(op: str, *, x=(2, 4), weight=(4,), residual=None, eps=1e-6, x_dtype=torch.float32,
               weight_dtype=torch.float32, residual_dtype=torch.float32):  # fmt: skip
    """``op(x, [residual,] weight, eps=eps)`` with tensors of the given shapes and dtypes."""
    fused = "fused" in op

    def build(d):
        x_t = torch.ones(x, dtype=x_dtype, device=d)
        w_t = torch.ones(weight, dtype=weight_dtype, device=d)
        if not fused:
            return (x_t, w_t), {"eps": eps}
        r_t = torch.ones(x if residual is None else residual, dtype=residual_dtype, device=d)
        return (x_t, r_t, w_t), {"eps": eps}

    return build


def _norm(op: str, name: str, exception: type[Exception], argument: str, **call) -> ErrorCase:
    return ErrorCase("NORM-ERRORS", op, name, _norm_call(op, **call), exception, names(argument))


NORM_OPS = ("rms_norm", "gemma_rms_norm", "fused_add_rms_norm", "gemma_fused_add_rms_norm")
NORM_ERRORS = [
    *(
        case
        for op in NORM_OPS
        for case in (
            _norm(op, "weight-wrong-length", ValueError, "weight", weight=(5,)),
            _norm(op, "weight-2d", ValueError, "weight", weight=(1, 4)),
            _norm(op, "eps-zero", ValueError, "eps", eps=0.0),
            _norm(op, "eps-negative", ValueError, "eps", eps=-1e-6),
            _norm(op, "eps-inf", ValueError, "eps", eps=float("inf")),
            _norm(op, "eps-nan", ValueError, "eps", eps=float("nan")),
            _norm(op, "integer-x", TypeError, "x", x_dtype=torch.int64),
            _norm(op, "integer-weight", TypeError, "weight", weight_dtype=torch.int32),
            _norm(op, "zero-dim-x", ValueError, "x", x=(), weight=(1,)),
        )
    ),
    *(
        case
        for op in NORM_OPS[2:]
        for case in (
            _norm(op, "residual-shape", ValueError, "residual", residual=(3, 4)),
            _norm(op, "residual-integer", TypeError, "residual", residual_dtype=torch.int64),
        )
    ),
]

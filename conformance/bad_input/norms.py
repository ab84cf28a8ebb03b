"""NORM-ERRORS' bad inputs (spec/norms.md) as records."""

from __future__ import annotations

import torch

from conformance.bad_input import ErrorCase, names


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
ERRORS = [
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

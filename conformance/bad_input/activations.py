"""ACT-ERRORS' bad inputs (spec/activations.md) as records."""

from __future__ import annotations

from collections.abc import Callable

import torch

from conformance.bad_input import Arguments, ErrorCase, names


def _gated(shape, dtype=torch.float32, **options) -> Callable[[torch.device | str], Arguments]:
    return lambda d: ((torch.ones(shape, dtype=dtype, device=d),), options)


def _activation(op: str, name: str, build, exception: type[Exception], argument: str) -> ErrorCase:
    return ErrorCase("ACT-ERRORS", op, name, build, exception, names(argument))


_NONE = {"approximate": "none"}
ERRORS = [
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


ERRORS += [
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
ERRORS += [
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

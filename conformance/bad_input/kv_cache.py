"""KV-ERRORS as records (spec/kv_cache.md): every bad input the clause lists, shared by the oracle's
self-test (tests/test_reference_kv_cache.py) and the properties (conformance/test_kv_cache.py).

Each write record starts from one valid call (T = 3 tokens, H = 2, Dk = 4, Dv = 3, three blocks of
2 slots) and breaks one argument; the read records break paged_attention's scales.
"""

from __future__ import annotations

import torch

from conformance.bad_input import ErrorCase, names
from conformance.bad_input.serving import paged_call

F8 = torch.float8_e4m3fn


def _t(*shape, dtype=torch.float32):
    return lambda d: torch.ones(shape, device=d).to(dtype)


def _ints(values, dtype=torch.int64):
    return lambda d: torch.tensor(values, dtype=dtype, device=d)


def write_call(**overrides):
    """write_kv_cache on a valid call with ``overrides`` (callables are built on the device)."""

    def build(d):
        call = {
            "key": torch.randn(3, 2, 4, device=d),
            "value": torch.randn(3, 2, 3, device=d),
            "k_cache": torch.zeros(3, 2, 2, 4, device=d),
            "v_cache": torch.zeros(3, 2, 2, 3, device=d),
            "slot_mapping": torch.tensor([0, -1, 5], device=d),
            "k_scale": None,
            "v_scale": None,
        }
        call.update({k: v(d) if callable(v) else v for k, v in overrides.items()})
        positional = tuple(call.pop(k) for k in ("key", "value", "k_cache", "v_cache", "slot_mapping"))
        return positional, call

    return build


def _write(name: str, argument: str | tuple, exception=ValueError, **overrides) -> ErrorCase:
    arguments = (argument,) if isinstance(argument, str) else argument
    build = write_call(**overrides)
    return ErrorCase("KV-ERRORS", "write_kv_cache", name, build, exception, names(*arguments))


def _fp8(**overrides):
    return {"k_cache": _t(3, 2, 2, 4, dtype=F8), "v_cache": _t(3, 2, 2, 3, dtype=F8),
            "k_scale": _t(), "v_scale": _t(), **overrides}  # fmt: skip


def _read(name: str, argument: str, **overrides) -> ErrorCase:
    fp8 = {"k_cache": _t(4, 2, 1, 16, dtype=F8), "v_cache": _t(4, 2, 1, 16, dtype=F8),
           "k_scale": _t(), "v_scale": _t(), **overrides}  # fmt: skip
    return ErrorCase("KV-ERRORS", "paged_attention", name, paged_call(**fp8), ValueError, names(argument))


ERRORS = [
    _write("key-integer", "key", TypeError, key=_t(3, 2, 4, dtype=torch.int32)),
    _write("value-integer", "value", TypeError, value=_t(3, 2, 3, dtype=torch.int32)),
    _write("k-cache-integer", "k_cache", TypeError, k_cache=_t(3, 2, 2, 4, dtype=torch.int32)),
    _write("key-2d", "key", key=_t(3, 8)),
    _write("k-cache-3d", "k_cache", k_cache=_t(6, 2, 4)),
    _write("value-dtype-differs", "value", value=_t(3, 2, 3, dtype=torch.float16)),
    _write("value-tokens-differ", "value", value=_t(4, 2, 3)),
    _write("k-cache-heads-differ", "k_cache", k_cache=_t(3, 2, 1, 4)),
    _write("k-cache-dim-differs", "k_cache", k_cache=_t(3, 2, 2, 3)),
    _write("v-cache-blocks-differ", "v_cache", v_cache=_t(4, 2, 2, 3)),
    _write("v-cache-block-size-differs", "v_cache", v_cache=_t(3, 3, 2, 3)),
    _write("k-cache-dtype-differs", "k_cache", k_cache=_t(3, 2, 2, 4, dtype=torch.float16)),
    _write("caches-fp8-and-not", "v_cache", **_fp8(v_cache=_t(3, 2, 2, 3), v_scale=None)),
    _write("value-without-v-cache", ("value", "v_cache"), v_cache=None),
    _write("v-cache-without-value", ("value", "v_cache"), value=None),
    _write("slots-float", "slot_mapping", slot_mapping=_ints([0, -1, 5], torch.float32)),
    _write("slots-bool", "slot_mapping", slot_mapping=_ints([True, False, True], torch.bool)),
    _write("slots-int16", "slot_mapping", slot_mapping=_ints([0, -1, 5], torch.int16)),
    _write("slots-2d", "slot_mapping", slot_mapping=_ints([[0, -1, 5]])),
    _write("slots-longer-than-tokens", "slot_mapping", slot_mapping=_ints([0, -1, 5, 1])),
    _write("slot-out-of-range", "slot_mapping", slot_mapping=_ints([0, 6, 1])),
    _write("slot-twice", "slot_mapping", slot_mapping=_ints([4, -1, 4])),
    _write("scale-for-plain-cache", "k_scale", k_scale=_t()),
    _write("fp8-without-k-scale", "k_scale", **_fp8(k_scale=None)),
    _write("fp8-without-v-scale", "v_scale", **_fp8(v_scale=None)),
    _write("scale-float64", "k_scale", **_fp8(k_scale=_t(dtype=torch.float64))),
    _write("scale-wrong-shape", "k_scale", **_fp8(k_scale=_t(3))),
    _write("scale-zero", "v_scale", **_fp8(v_scale=lambda d: torch.zeros((), device=d))),
    _write("scale-nan", "k_scale", **_fp8(k_scale=lambda d: torch.full((2,), float("nan"), device=d))),
    _write("key-only-with-v-scale", "v_scale", value=None, v_cache=None, **{"v_scale": _t()}),
    _read("read-fp8-without-k-scale", "k_scale", k_scale=None),
    _read("read-fp8-without-v-scale", "v_scale", v_scale=None),
    _read("read-scale-wrong-shape", "k_scale", k_scale=_t(2)),
    _read("read-scale-negative", "v_scale", v_scale=lambda d: -torch.ones((), device=d)),
    _read("read-caches-of-two-fp8-dtypes", "v_cache", v_cache=_t(4, 2, 1, 16, dtype=torch.float8_e4m3fnuz)),
    ErrorCase(
        "KV-ERRORS",
        "paged_attention",
        "read-scale-for-plain-cache",
        paged_call(k_scale=_t()),
        ValueError,
        names("k_scale"),
    ),  # fmt: skip
]

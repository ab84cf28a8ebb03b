"""Conformance properties for spec/norms.md (RMSNorm, Gemma RMSNorm, the fused residual-add forms).

Each test names its clauses with ``@pytest.mark.clause``; the backend/device pairs come from
the opconform plugin. Every comparison uses the norms rows of TOL-TABLE unscaled (NORM-TOL): the
row of the output's dtype, except under mixed dtypes a normalized output, which gets the row of the
dtype it may have been rounded in (NORM-MIXED: x's, or for the LLaMA forms a narrower weight's).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.norms import ERRORS
from conformance.checks import assert_close, check, describe
from conformance.harness import profiles
from conformance.strategies.norms import (
    FLOAT16_EXTREME_SCALES,
    LAYOUTS,
    eps_scale_inputs,
    mixed_inputs,
    norm_inputs,
)
from conformance.tolerances import tolerance
from reference import norms as oracle

FAMILY = "norms"


def _ops(*names: str) -> list:
    return [pytest.param(op, marks=pytest.mark.op(op), id=op) for op in names]


SINGLE_OPS = _ops("rms_norm", "gemma_rms_norm")
FUSED_OPS = _ops("fused_add_rms_norm", "gemma_fused_add_rms_norm")
# NORM-LAYOUT and NORM-MIXED: small rows suffice (a view or a dtype is wrong on every row). The
# self-tests run the field's formulas on these very draws (tests/test_reference_norms.py).
SMALL = 1 << 12
VIEW_RECIPES = norm_inputs(layouts=LAYOUTS[1:], max_numel=SMALL)
# NORM-LAYOUT: the view the field hands a norm kernel, x as rows of a wider buffer (a q/k split).
ROW_STRIDED_RECIPES = norm_inputs(layouts=("row-strided",), max_numel=SMALL)
MIXED_RECIPES = mixed_inputs(max_numel=SMALL)


def _call(backend, op: str, x, residual, weight, eps):
    """The op's outputs as a tuple (one output, or the fused pair) and the oracle's."""
    args = (x, residual, weight) if "fused" in op else (x, weight)
    got = getattr(backend, op)(*args, eps=eps)
    want = getattr(oracle, op)(*(a.cpu() for a in args), eps=eps)
    return (got if "fused" in op else (got,)), (want if "fused" in op else (want,))


def _compare(backend, device, op, recipe, clause: str) -> None:
    x, residual, weight = recipe.make(device)
    got, want = _call(backend, op, x, residual, weight, recipe.eps)
    names = ("normed", "new_residual") if "fused" in op else ("out",)
    for name, a, e in zip(names, got, want, strict=True):
        assert_close(
            a,
            e,
            clause=clause,
            family=FAMILY,
            context=f"{describe(backend, device, op, eps=recipe.eps)}: {name}, x scale {recipe.scale:g}",
            dtype=x.dtype,  # NORM-RMS, NORM-GEMMA, NORM-FUSED-ADD: the outputs have x's dtype
            device=device,
        )


@pytest.mark.clause("NORM-RMS")
@pytest.mark.op("rms_norm")
@given(recipe=norm_inputs())
def test_rms_norm_matches_oracle(backend, device, recipe):
    """rms_norm equals x * rsqrt(mean(x^2) + eps) * weight within the dtype tolerance."""
    _compare(backend, device, "rms_norm", recipe, "NORM-RMS")


@pytest.mark.clause("NORM-GEMMA")
@pytest.mark.op("gemma_rms_norm")
@given(recipe=norm_inputs())
def test_gemma_rms_norm_matches_oracle(backend, device, recipe):
    """gemma_rms_norm equals x * rsqrt(mean(x^2) + eps) * (1 + weight) within the dtype tolerance."""
    _compare(backend, device, "gemma_rms_norm", recipe, "NORM-GEMMA")


@pytest.mark.clause("NORM-EPS")
@pytest.mark.parametrize("op", SINGLE_OPS)
@given(recipe=eps_scale_inputs())
def test_eps_is_inside_the_root(backend, device, op, recipe):
    """On float32 rows whose mean square is comparable to eps the output is the oracle's."""
    _compare(backend, device, op, recipe, "NORM-EPS")


@pytest.mark.clause("NORM-FUSED-ADD")
@pytest.mark.parametrize("op", FUSED_OPS)
@given(recipe=norm_inputs())
def test_fused_add_returns_norm_of_sum_and_sum(backend, device, op, recipe):
    """The fused op returns (norm(x + residual), x + residual), in that order, and leaves its inputs alone."""
    x, residual, weight = recipe.make(device)
    before = (x.clone(), residual.clone())
    out = getattr(backend, op)(x, residual, weight, eps=recipe.eps)
    context = describe(backend, device, op, eps=recipe.eps)
    check(
        isinstance(out, tuple | list) and len(out) == 2,
        clause="NORM-FUSED-ADD",
        message=f"{context}: returned {type(out).__name__}, expected the pair (normed, new_residual)",
    )
    want = getattr(oracle, op)(x.cpu(), residual.cpu(), weight.cpu(), eps=recipe.eps)
    for name, a, e in zip(("normed", "new_residual"), out, want, strict=True):
        assert_close(a, e, clause="NORM-FUSED-ADD", family=FAMILY, context=f"{context}: {name}",
                     dtype=x.dtype, device=device)  # fmt: skip
    check(
        torch.equal(x, before[0]) and torch.equal(residual, before[1]),
        clause="NORM-FUSED-ADD",
        message=f"{context}: x or residual was modified in place",
    )


@pytest.mark.clause("NORM-DTYPE")
@pytest.mark.parametrize("op", SINGLE_OPS + FUSED_OPS)
@given(
    recipe=st.one_of(
        norm_inputs(dtypes=(torch.float16,), scales=FLOAT16_EXTREME_SCALES),
        norm_inputs(max_numel=1 << 12),
    )
)
def test_output_dtype_and_float32_compute(backend, device, op, recipe):
    """Every output has x's dtype, shape and device, and float16 rows whose squares overflow or
    underflow in float16 still match the oracle (the compute is float32 or better)."""
    x, residual, weight = recipe.make(device)
    got, want = _call(backend, op, x, residual, weight, recipe.eps)
    context = describe(backend, device, op, eps=recipe.eps) + f", x scale {recipe.scale:g}"
    for a, e in zip(got, want, strict=True):
        check(
            a.dtype == x.dtype and a.shape == x.shape and a.device == x.device,
            clause="NORM-DTYPE",
            message=f"{context}: output dtype {a.dtype}, shape {tuple(a.shape)}, device {a.device}; "
            f"expected {x.dtype}, {tuple(x.shape)}, {x.device}",
        )
        assert_close(a, e, clause="NORM-DTYPE", family=FAMILY, context=context)


@pytest.mark.clause("NORM-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad input raises the documented exception type, with a message naming the argument."""
    check_backend_raises(case, backend, device)


@pytest.mark.clause("NORM-LAYOUT")
@pytest.mark.parametrize("op", SINGLE_OPS)
@given(recipe=ROW_STRIDED_RECIPES)
def test_row_strided_x_gives_the_oracle(backend, device, op, recipe):
    """x as rows of a wider buffer (NaN around them), the weight contiguous: the oracle's values of
    the viewed elements, in x's dtype, and x left unchanged."""
    x, residual, weight = recipe.make(device)
    _check_views(backend, device, op, recipe, x, residual, weight.contiguous(), clause="NORM-LAYOUT")


@pytest.mark.clause("NORM-VIEWS")
@pytest.mark.parametrize("op", SINGLE_OPS + FUSED_OPS)
@profiles.should_examples()
@given(recipe=VIEW_RECIPES)
def test_should_accept_views(backend, device, op, recipe):
    """x and residual as row-strided, strided or transposed views and weight as a strided view
    (NaN around them in memory) give the oracle's values of the viewed elements, in x's dtype,
    and are left unchanged."""
    x, residual, weight = recipe.make(device)
    _check_views(backend, device, op, recipe, x, residual, weight, clause="NORM-VIEWS")


def _check_views(backend, device, op, recipe, x, residual, weight, *, clause: str) -> None:
    before = (x.clone(), residual.clone(), weight.clone())
    got, want = _call(backend, op, x, residual, weight, recipe.eps)
    context = f"{describe(backend, device, op, eps=recipe.eps)}: {recipe.describe()}"
    for name, a, e in zip(_names(op), got, want, strict=True):
        assert_close(a, e, clause=clause, family=FAMILY, context=f"{context}: {name}",
                     dtype=x.dtype, device=device)  # fmt: skip
    check(
        all(torch.equal(t, b) for t, b in zip((x, residual, weight), before, strict=True)),
        clause=clause,
        message=f"{context}: an input view was modified in place",
    )


def _names(op: str) -> tuple[str, ...]:
    return ("normed", "new_residual") if "fused" in op else ("out",)


@pytest.mark.clause("NORM-MIXED")
@pytest.mark.parametrize("op", SINGLE_OPS + FUSED_OPS)
@given(recipe=MIXED_RECIPES)
def test_mixed_dtypes(backend, device, op, recipe):
    """With weight and residual in other dtypes than x, each output has a dtype NORM-MIXED allows;
    the normalized output is within x's row of TOL-TABLE, new_residual within its own dtype's."""
    x, residual, weight = recipe.make(device)
    got, want = _call(backend, op, x, residual, weight, recipe.eps)
    context = f"{describe(backend, device, op, eps=recipe.eps)}: {recipe.describe()}"
    fused = "fused" in op
    allowed = (
        oracle.normed_dtypes(op, x, weight, residual if fused else None),
        *([oracle.residual_dtypes(x, residual)] if fused else []),
    )
    for name, a, e, dtypes in zip(_names(op), got, want, allowed, strict=True):
        check(
            isinstance(a, torch.Tensor) and a.dtype in dtypes and a.shape == x.shape and a.device == x.device,
            clause="NORM-MIXED",
            message=f"{context}: {name} is {_summary(a)}; expected dtype in {[str(d) for d in dtypes]}, "
            f"shape {tuple(x.shape)}, device {x.device}",
        )
        # A normalized output is rounded at most NORM-TOL's times, even when wider: in x's dtype, or
        # (LLaMA forms) in a narrower weight's (NORM-MIXED: vLLM 0.33's x.to(weight.dtype) * weight).
        rounding = a.dtype if name == "new_residual" else oracle.normed_rounding_dtype(op, x, weight)
        tol = tolerance(FAMILY, rounding)
        assert_close(a, e, clause="NORM-MIXED", family=FAMILY, tol=tol, context=f"{context}: {name}")


def _summary(a) -> str:
    if not isinstance(a, torch.Tensor):
        return type(a).__name__
    return f"{a.dtype}, shape {tuple(a.shape)}, device {a.device}"

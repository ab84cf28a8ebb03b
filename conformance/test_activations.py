"""Conformance properties for spec/activations.md (GEGLU, SwiGLU, the clamped SwiGLU-step).

Each test names its clauses with ``@pytest.mark.clause``; the backend/device pairs come from
the opconform plugin.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.activations import ERRORS
from conformance.checks import assert_close, check, describe
from conformance.harness import profiles
from conformance.strategies.activations import (
    OAI_ALPHAS,
    SILU_MINIMUM,
    clamp_limits,
    gated_inputs,
    oai_limits,
    situ_betas,
    situ_linear_betas,
    small_limits,
    with_limit_edges,
)
from conformance.strategies.common import pinned_draw
from conformance.tolerances import (
    oai_up_scale,
    rounded_atol_scale,
    situ_up_scale,
    swiglu_step_bound,
    up_scale,
)
from reference import activations as oracle

FAMILY = "activations"
# ACT-LAYOUT (and ACT-GELU-VARIANTS for the elementwise ops): the output has x's dtype and device.
# Every comparison with the oracle passes dtype=/device=, so a wrong one fails the property's own
# clause in one line (a float64 output for float32 x matches the oracle's values within tolerance).
MODES = oracle.APPROXIMATE_MODES


def _option_strategy(op: str):
    """The keyword options of each op."""
    if op == "gelu_and_mul":
        return st.fixed_dictionaries({"approximate": st.sampled_from(MODES)})
    if op in ("swiglu_step_and_mul", "silu_clamped_and_mul"):
        return st.fixed_dictionaries({"limit": st.one_of(st.none(), clamp_limits())})
    if op == "swiglu_oai_and_mul":
        options = {"alpha": st.sampled_from(OAI_ALPHAS), "limit": oai_limits(), "interleaved": st.booleans()}
        return st.fixed_dictionaries(options)
    if op == "situ_and_mul":
        return st.fixed_dictionaries({"beta": situ_betas(), "linear_beta": situ_linear_betas()})
    return st.just({})


# ACT-GELU-VARIANTS: elementwise ops, whose output has x's shape.
ELEMENTWISE = ("new_gelu", "fast_gelu", "quick_gelu")


def _atol_scale(op: str, x: torch.Tensor, options: dict):
    """ACT-TOL's scaling for op (none for the elementwise ops: nothing multiplies them), plus
    ACT-TOL-ROUNDED's bound for the ops the field computes one rounded step at a time."""
    if op in ELEMENTWISE:
        return rounded_atol_scale(op, x)
    if op == "swiglu_oai_and_mul":
        return rounded_atol_scale(op, x, base=oai_up_scale(x, **options), **options)
    if op == "silu_clamped_and_mul":
        return rounded_atol_scale(op, x, base=up_scale(x, **options), **options)
    if op == "situ_and_mul":
        return situ_up_scale(x, **options)
    return up_scale(x, **options)


# Layout, purity and NaN properties do not depend on size: small inputs keep them cheap.
SMALL = 1 << 12
# A third of the examples where the clause's bug shows on every draw (paying for the ranges' regions,
# spec/README.md Ranges): a wrong output dtype, shape or device, or a write to the input.
EVERY_DRAW = profiles.share_of_examples(1 / 3)

GATED = ("gelu_and_mul", "silu_and_mul", "swiglu_step_and_mul", "silu_clamped_and_mul")
GATED_OPS = [
    pytest.param(op, marks=pytest.mark.op(op), id=op)
    for op in (*GATED, "swiglu_oai_and_mul", "situ_and_mul", *ELEMENTWISE)
]


@pytest.mark.clause("ACT-GEGLU")
@pytest.mark.op("gelu_and_mul")
@given(recipe=gated_inputs(), approximate=pinned_draw("activation.approximate", st.sampled_from(MODES)))
def test_geglu_matches_oracle(backend, device, recipe, approximate):
    """gelu_and_mul equals gelu(left) * right within the dtype tolerance."""
    x = recipe.make(device)
    out = backend.gelu_and_mul(x, approximate=approximate)
    assert_close(
        out,
        oracle.gelu_and_mul(x.cpu(), approximate=approximate),
        clause="ACT-GEGLU",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=up_scale(x),
        context=describe(backend, device, "gelu_and_mul", approximate=approximate),
    )


@pytest.mark.clause("ACT-GEGLU-MODES")
@pytest.mark.op("gelu_and_mul")
@given(
    recipe=gated_inputs(dtypes=(torch.float32,), distribution="gelu-gap"),
    approximate=pinned_draw("activation.approximate", st.sampled_from(MODES)),  # MODEL-RUN: its mode
)
def test_geglu_is_nearer_the_requested_mode(backend, device, recipe, approximate):
    """On inputs where erf and tanh GELU differ, the output is nearer the requested mode."""
    x = recipe.make(device)
    out = backend.gelu_and_mul(x, approximate=approximate).cpu().double()
    other = "tanh" if approximate == "none" else "none"
    err_requested = (out - oracle.gelu_and_mul(x.cpu(), approximate=approximate)).abs().max().item()
    err_other = (out - oracle.gelu_and_mul(x.cpu(), approximate=other)).abs().max().item()
    check(
        err_requested < err_other,
        clause="ACT-GEGLU-MODES",
        message=f"{describe(backend, device, 'gelu_and_mul', approximate=approximate)}: max error "
        f"{err_requested:.3g} against the requested mode but {err_other:.3g} against "
        f"approximate={other!r} (shape {tuple(x.shape)}): the mode flag is swapped or ignored",
    )


@pytest.mark.clause("ACT-GEGLU-NPU-ARGS")
@pytest.mark.op("npu_geglu_args")
@pytest.mark.parametrize("approximate", MODES)
def test_npu_geglu_args(backend, device, approximate):
    """The Ascend npu_geglu arguments are dim=-1, approximate 1 (tanh) / 0 (none), activate_left=True."""
    got = backend.npu_geglu_args(approximate)
    want = oracle.npu_geglu_args(approximate)
    check(
        got == want,
        clause="ACT-GEGLU-NPU-ARGS",
        message=f"backend {backend.name!r}: npu_geglu_args({approximate!r}) = {got}, expected {want}",
    )


@pytest.mark.clause("ACT-GELU-NPU-OPS")
@pytest.mark.op("npu_gelu_variant_args")
@pytest.mark.parametrize("op", ELEMENTWISE)
def test_npu_gelu_variant_args(backend, device, op):
    """new_gelu and fast_gelu go to npu_gelu(approximate="tanh"), quick_gelu to npu_fast_gelu."""
    got = backend.npu_gelu_variant_args(op)
    want = oracle.npu_gelu_variant_args(op)
    check(
        got == want,
        clause="ACT-GELU-NPU-OPS",
        message=f"backend {backend.name!r}: npu_gelu_variant_args({op!r}) = {got}, expected {want} "
        "(torch_npu's npu_fast_gelu is x * sigmoid(1.702 x); transformers' fast_gelu is the tanh GELU)",
    )


@pytest.mark.clause("ACT-SWIGLU")
@pytest.mark.op("silu_and_mul")
@given(recipe=gated_inputs())
def test_silu_and_mul_matches_oracle(backend, device, recipe):
    """silu_and_mul equals silu(left) * right within the dtype tolerance."""
    x = recipe.make(device)
    assert_close(
        backend.silu_and_mul(x),
        oracle.silu_and_mul(x.cpu()),
        clause="ACT-SWIGLU",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=up_scale(x),
        context=describe(backend, device, "silu_and_mul"),
    )


@pytest.mark.clause("ACT-SWIGLU-STEP")
@pytest.mark.op("swiglu_step_and_mul")
@given(recipe=gated_inputs(), limit=pinned_draw("activation.limit", st.one_of(st.none(), clamp_limits())))
def test_swiglu_step_matches_oracle(backend, device, recipe, limit):
    """swiglu_step_and_mul equals silu(gate).clamp(max=limit) * up.clamp(-limit, limit)."""
    x = with_limit_edges(recipe.make(device), limit)  # the limit at T - 1, T, T + 1
    assert_close(
        backend.swiglu_step_and_mul(x, limit=limit),
        oracle.swiglu_step_and_mul(x.cpu(), limit=limit),
        clause="ACT-SWIGLU-STEP",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=up_scale(x, limit=limit),
        context=describe(backend, device, "swiglu_step_and_mul", limit=limit),
    )


@pytest.mark.clause("ACT-SWIGLU-STEP-NO-LIMIT")
@pytest.mark.op("swiglu_step_and_mul")
@given(recipe=gated_inputs(scales=(10.0, 30.0)))
def test_swiglu_step_without_limit_does_not_clamp(backend, device, recipe):
    """limit=None means no clamp at all: large values pass through unchanged (no default limit)."""
    x = recipe.make(device)
    assert_close(
        backend.swiglu_step_and_mul(x, limit=None),
        oracle.silu_and_mul(x.cpu()),
        clause="ACT-SWIGLU-STEP-NO-LIMIT",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=up_scale(x),
        context=describe(backend, device, "swiglu_step_and_mul", limit=None),
    )


@pytest.mark.clause("ACT-SWIGLU-STEP-BOUND")
@pytest.mark.op("swiglu_step_and_mul")
@given(recipe=gated_inputs(scales=(3.0, 10.0, 30.0)), limit=clamp_limits(low=SILU_MINIMUM))
def test_swiglu_step_is_bounded(backend, device, recipe, limit):
    """For limit >= 0.2785 every output lies in [-limit^2, limit^2] (up to one output rounding)."""
    x = recipe.make(device)
    out = backend.swiglu_step_and_mul(x, limit=limit).cpu().double()
    bound = swiglu_step_bound(limit, x.dtype)
    worst = out.abs().max().item()
    check(
        worst <= bound,
        clause="ACT-SWIGLU-STEP-BOUND",
        message=f"{describe(backend, device, 'swiglu_step_and_mul', limit=limit)}: max |out| = {worst:.6g} "
        f"exceeds limit^2 = {limit * limit:.6g} (dtype {x.dtype}, shape {tuple(x.shape)})",
    )


@pytest.mark.clause("ACT-SWIGLU-STEP-ASYM")
@pytest.mark.op("swiglu_step_and_mul")
@given(
    recipe=gated_inputs(dtypes=(torch.float32,), distribution="negative-gate", scales=(0.1,)),
    limit=small_limits(),
)
def test_swiglu_step_gate_clamp_is_one_sided(backend, device, recipe, limit):
    """The gate is clamped only from above: silu(gate) < -limit stays below -limit."""
    x = recipe.make(device)
    assert_close(
        backend.swiglu_step_and_mul(x, limit=limit),
        oracle.swiglu_step_and_mul(x.cpu(), limit=limit),
        clause="ACT-SWIGLU-STEP-ASYM",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=up_scale(x, limit=limit),
        context=describe(backend, device, "swiglu_step_and_mul", limit=limit),
    )


@pytest.mark.clause("ACT-LAYOUT")
@pytest.mark.parametrize("op", GATED_OPS)
@EVERY_DRAW
@given(data=st.data(), recipe=gated_inputs(max_numel=SMALL))
def test_gated_output_layout(backend, device, op, data, recipe):
    """Shape [..., d] (x's shape, elementwise), x's dtype and device."""
    options = data.draw(_option_strategy(op), label="options")
    x = recipe.make(device)
    out = getattr(backend, op)(x, **options)
    context = describe(backend, device, op, **options)
    want_shape = tuple(x.shape) if op in ELEMENTWISE else (*x.shape[:-1], x.shape[-1] // 2)
    check(
        isinstance(out, torch.Tensor)
        and tuple(out.shape) == want_shape
        and out.dtype == x.dtype
        and out.device == x.device,
        clause="ACT-LAYOUT",
        message=f"{context}: returned {_shape_dtype_device(out)}; "
        f"expected {want_shape}, {x.dtype}, {x.device}",
    )


def _shape_dtype_device(out) -> str:
    if not isinstance(out, torch.Tensor):
        return f"a {type(out).__name__}"
    return f"shape {tuple(out.shape)}, dtype {out.dtype}, device {out.device}"


@pytest.mark.clause("ACT-VIEWS")
@pytest.mark.parametrize("op", GATED_OPS)
@profiles.should_examples()
@given(data=st.data(), recipe=gated_inputs(layouts=("strided", "transposed"), max_numel=SMALL))
def test_should_accept_views(backend, device, op, data, recipe):
    """A strided or transposed view gives its contiguous copy's result and is left unchanged."""
    options = data.draw(_option_strategy(op), label="options")
    x = recipe.make(device)
    before = x.clone()
    out = getattr(backend, op)(x, **options)
    context = describe(backend, device, op, **options)
    modified = f"{context}: the {recipe.layout} view was modified"
    check(torch.equal(x, before), clause="ACT-VIEWS", message=modified)
    from_copy = getattr(backend, op)(x.contiguous(), **options)
    assert_close(
        out,
        from_copy.double(),
        clause="ACT-VIEWS",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=_atol_scale(op, x, options),
        context=f"{context}: {recipe.layout} view vs its contiguous copy",
        expected_as="backend's contiguous-copy result",
    )


@pytest.mark.clause("ACT-PURE")
@pytest.mark.parametrize("op", GATED_OPS)
@EVERY_DRAW
@given(data=st.data(), recipe=gated_inputs(max_numel=SMALL))
def test_gated_input_not_modified(backend, device, op, data, recipe):
    """The op leaves its input unchanged."""
    options = data.draw(_option_strategy(op), label="options")
    x = recipe.make(device)
    before = x.clone()
    getattr(backend, op)(x, **options)
    check(
        torch.equal(x, before),
        clause="ACT-PURE",
        message=f"{describe(backend, device, op, **options)}: the input was modified in place",
    )


@pytest.mark.clause("ACT-NAN")
@pytest.mark.parametrize("op", GATED_OPS)
@given(data=st.data(), recipe=gated_inputs(max_numel=SMALL))
def test_gated_nan_propagates(backend, device, op, data, recipe):
    """A NaN in x gives NaN at the output position it feeds; other positions are unaffected."""
    options = data.draw(_option_strategy(op), label="options")
    x = recipe.make("cpu")
    flat = data.draw(st.integers(0, x.numel() - 1), label="nan_position")
    x.view(-1)[flat] = float("nan")
    x = x.to(device)
    out = getattr(backend, op)(x, **options)
    assert_close(
        out,
        getattr(oracle, op)(x.cpu(), **options),
        clause="ACT-NAN",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=_atol_scale(op, x, options),
        context=describe(backend, device, op, **options) + f", NaN at flat input index {flat}",
    )


@pytest.mark.clause("ACT-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad input raises the documented exception type, with a message naming the argument."""
    check_backend_raises(case, backend, device)

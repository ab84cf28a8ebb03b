"""Conformance properties for spec/activations.md: the clamped look-alikes (clamp before the SiLU,
the gpt-oss SwiGLU, SiTU), their missing defaults, the limit's selection from the model config, and
the GELU variants.

Each test names its clauses with ``@pytest.mark.clause``; the backend/device pairs come from
the opconform plugin.
"""

from __future__ import annotations

import numbers

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from backends import not_implemented_reason
from conformance.checks import assert_close, check, describe
from conformance.strategies.activations import (
    OAI_ALPHAS,
    SITU_SCALES,
    clamp_limits,
    gated_inputs,
    limit_configs,
    oai_limits,
    situ_betas,
    situ_linear_betas,
    with_limit_edges,
)
from conformance.strategies.common import pinned_draw, seeds
from conformance.tolerances import oai_up_scale, rounded_atol_scale, situ_bound, situ_up_scale, up_scale
from reference import activations as oracle

FAMILY = "activations"
# ACT-LAYOUT (and ACT-GELU-VARIANTS for the elementwise ops): the output has x's dtype and device.
# Every comparison with the oracle passes dtype=/device=, so a wrong one fails the property's own
# clause in one line (a float64 output for float32 x matches the oracle's values within tolerance).


def _clamped_scale(op: str, x, limit) -> torch.Tensor:
    """ACT-TOL's up_scale; for silu_clamped_and_mul plus ACT-TOL-ROUNDED's bound (vLLM's
    forward_native rounds the sigmoid and both products)."""
    scale = up_scale(x, limit=limit)
    if op != "silu_clamped_and_mul":
        return scale
    return rounded_atol_scale(op, x, base=scale, limit=limit)


def _matches_oracle(backend, device, op: str, x, *, clause: str, atol_scale=None, **options) -> None:
    """``backend.op(x, **options)`` against the oracle's, with x's dtype and device required."""
    assert_close(
        getattr(backend, op)(x, **options),
        getattr(oracle, op)(x.cpu(), **options),
        clause=clause,
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=atol_scale,
        context=describe(backend, device, op, **options),
    )


@pytest.mark.clause("ACT-SILU-CLAMPED")
@pytest.mark.op("silu_clamped_and_mul")
@given(recipe=gated_inputs(), limit=st.one_of(st.none(), clamp_limits()))
def test_silu_clamped_matches_oracle(backend, device, recipe, limit):
    """silu_clamped_and_mul equals silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)."""
    x = with_limit_edges(recipe.make(device), limit)  # the limit at T - 1, T, T + 1
    op = "silu_clamped_and_mul"
    scale = _clamped_scale(op, x, limit)
    _matches_oracle(backend, device, op, x, clause="ACT-SILU-CLAMPED", atol_scale=scale, limit=limit)


def _gates_above_limit(shape, limit: float, seed: int, device) -> torch.Tensor:
    """float32 x whose gates lie in [limit + 1, limit + 10] and whose up half is N(0, limit)."""
    gen = torch.Generator().manual_seed(seed)
    half = (*shape[:-1], shape[-1] // 2)
    gate = limit + 1 + 9 * torch.rand(half, generator=gen, dtype=torch.float64)
    up = limit * torch.randn(half, generator=gen, dtype=torch.float64)
    return torch.cat([gate, up], dim=-1).float().to(device)


@pytest.mark.clause("ACT-CLAMP-ORDER")
@pytest.mark.parametrize(
    "op",
    [pytest.param(op, marks=pytest.mark.op(op)) for op in ("silu_clamped_and_mul", "swiglu_step_and_mul")],
)
@given(rows=st.integers(1, 8), half=st.integers(1, 64), limit=clamp_limits(high=10.0), seed=seeds(bits=32))
def test_clamp_order(backend, device, op, rows, half, limit, seed):
    """Gates above the limit: silu_clamped gives silu(limit) * up_c; swiglu_step min(silu(g), limit) * up_c"""
    x = _gates_above_limit((rows, 2 * half), limit, seed, device)
    assert_close(
        getattr(backend, op)(x, limit=limit),
        getattr(oracle, op)(x.cpu(), limit=limit),
        clause="ACT-CLAMP-ORDER",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=_clamped_scale(op, x, limit),
        context=describe(backend, device, op, limit=limit) + ", every gate above the limit",
    )


@pytest.mark.clause("ACT-SWIGLU-OAI")
@pytest.mark.op("swiglu_oai_and_mul")
@given(
    recipe=gated_inputs(scales=(1.0, 3.0, 10.0)),
    alpha=pinned_draw("activation.oai_alpha", st.sampled_from(OAI_ALPHAS)),  # MODEL-RUN: gpt-oss's own
    limit=pinned_draw("activation.oai_limit", oai_limits()),
    interleaved=pinned_draw("activation.oai_interleaved", st.booleans()),
)
def test_swiglu_oai_matches_oracle(backend, device, recipe, alpha, limit, interleaved):
    """g * sigmoid(alpha g) * (u + 1) with the clamps (up also at the limit +- 1 ulp), either layout."""
    x = with_limit_edges(recipe.make(device), limit, interleaved=interleaved)
    options = {"alpha": alpha, "limit": limit, "interleaved": interleaved}
    op = "swiglu_oai_and_mul"
    scale = rounded_atol_scale(op, x, base=oai_up_scale(x, **options), **options)
    _matches_oracle(backend, device, op, x, clause="ACT-SWIGLU-OAI", atol_scale=scale, **options)


@pytest.mark.clause("ACT-SWIGLU-OAI-LAYOUT")
@pytest.mark.op("swiglu_oai_and_mul")
@given(recipe=gated_inputs(dtypes=(torch.float32,), scales=(1.0, 3.0)), limit=oai_limits())
def test_swiglu_oai_interleaved_is_deinterleaved_halves(backend, device, recipe, limit):
    """interleaved=True on x equals interleaved=False on cat(x[..., ::2], x[..., 1::2])."""
    x = recipe.make(device)
    halves = torch.cat([x[..., ::2], x[..., 1::2]], dim=-1)
    options = {"alpha": 1.702, "limit": limit}
    context = describe(backend, device, "swiglu_oai_and_mul", **options)
    interleaved = backend.swiglu_oai_and_mul(x, interleaved=True, **options)
    assert_close(
        interleaved,
        backend.swiglu_oai_and_mul(halves, interleaved=False, **options).double(),
        clause="ACT-SWIGLU-OAI-LAYOUT",
        family=FAMILY,
        atol_scale=oai_up_scale(x, limit=limit, interleaved=True),
        context=context + ": interleaved x vs its de-interleaved halves",
        expected_as="backend's result on the halves",
    )
    if x.shape[-1] >= 4:  # with d >= 2 the layouts pick different columns of a random x
        on_halves = backend.swiglu_oai_and_mul(x, interleaved=False, **options)
        check(
            not torch.equal(interleaved, on_halves),
            clause="ACT-SWIGLU-OAI-LAYOUT",
            message=f"{context}: interleaved=True and False give the same output: the flag is ignored",
        )


CLAMPED = {
    "swiglu_step_and_mul": {},
    "silu_clamped_and_mul": {},
    "swiglu_oai_and_mul": {"alpha": 1.702, "interleaved": True},
}
CLAMPED_OPS = [pytest.param(op, marks=pytest.mark.op(op), id=op) for op in CLAMPED]


@pytest.mark.clause("ACT-CLAMP-NO-DEFAULT")
@pytest.mark.parametrize("op", CLAMPED_OPS)
def test_clamped_op_requires_limit(backend, device, op):
    """Calling a clamped op without ``limit`` raises TypeError: there is no default limit."""
    x = torch.ones(2, 4, device=device)
    try:
        getattr(backend, op)(x, **CLAMPED[op])
    except TypeError:
        return
    except Exception as error:  # noqa: BLE001 - any other outcome breaks the clause
        outcome = f"raised {type(error).__name__}: {error}"
    else:
        outcome = "returned a result (a default limit was applied)"
    check(
        False,
        clause="ACT-CLAMP-NO-DEFAULT",
        message=f"backend {backend.name!r}: {op}(x) without limit {outcome}",
    )


@pytest.mark.clause("ACT-CLAMP-NO-DEFAULT")
@pytest.mark.parametrize("op", CLAMPED_OPS)
@given(recipe=gated_inputs(scales=(10.0, 30.0), max_numel=1 << 12))
def test_clamped_op_without_limit_does_not_clamp(backend, device, op, recipe):
    """limit=None equals the unclamped formula also far above any usual limit."""
    x = recipe.make(device)
    options = {**CLAMPED[op], "limit": None}
    if op == "swiglu_oai_and_mul":  # ACT-TOL-ROUNDED: the field's gpt-oss code rounds every step
        scale = rounded_atol_scale(op, x, base=oai_up_scale(x, **options), **options)
    else:
        scale = _clamped_scale(op, x, None)
    assert_close(
        getattr(backend, op)(x, **options),
        getattr(oracle, op)(x.cpu(), **options),
        clause="ACT-CLAMP-NO-DEFAULT",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=scale,
        context=describe(backend, device, op, **options),
    )


# ACT-LIMIT-CONFIG / -OFF: (config, layer_idx, shared, expected).
SELECTED = [
    ({"swiglu_limits": [0.0, 7.0], "swiglu_limits_shared": [0.0, 16.0]}, 1, False, 7.0),
    ({"swiglu_limits": [0.0, 7.0], "swiglu_limits_shared": [0.0, 16.0]}, 1, True, 16.0),
    ({"swiglu_limits": [2.5], "swiglu_limits_shared": [0.0]}, 0, False, 2.5),
    ({"swiglu_limits": [0.0], "swiglu_limits_shared": [3]}, 0, True, 3.0),
    ({"swiglu_limits_shared": [5.0]}, 0, True, 5.0),
    ({"swiglu_limits": [0, 7], "swiglu_limits_shared": [0, 0]}, 1, False, 7),
]
# Past a short list: None, or IndexError under ACT-LIMIT-CONFIG-OFF (transformers' and sglang's readers).
SHORT = [
    ("short-routed", {"swiglu_limits": [7.0, 7.0]}, 2, False),
    ("short-shared", {"swiglu_limits_shared": [16.0]}, 3, True),
]
DISABLED = [
    ("zero-routed", {"swiglu_limits": [0.0, 0]}, 1, False),
    ("zero-shared", {"swiglu_limits_shared": [0]}, 0, True),
    ("none-value", {"swiglu_limits": [None]}, 0, False),
    ("missing-key", {"swiglu_limits": [7.0]}, 0, True),
    ("missing-routed", {"swiglu_limits_shared": [7.0]}, 0, False),
    ("none-list", {"swiglu_limits": None}, 0, False),
    *SHORT,
]
# ACT-LIMIT-CONFIG-ROBUST (SHOULD): a negative value, and a short list, give None.
ROBUST = [
    ("negative-routed", {"swiglu_limits": [-7.0]}, 0, False),
    ("negative-shared", {"swiglu_limits_shared": [-7.0]}, 0, True),
    *SHORT,
]


@pytest.mark.clause("ACT-LIMIT-CONFIG")
@pytest.mark.op("swiglu_limit")
@pytest.mark.parametrize("config, layer_idx, shared, expected", SELECTED)
def test_limit_selected_from_config(backend, device, config, layer_idx, shared, expected):
    """A value > 0 in the list for this expert kind (shared or routed) is the limit: a number (an
    int or a float: a config's integer 3 is valid), never a bool or a non-number."""
    got = backend.swiglu_limit(config, layer_idx, shared=shared)
    check(
        isinstance(got, numbers.Real) and not isinstance(got, bool) and got == expected,
        clause="ACT-LIMIT-CONFIG",
        message=f"backend {backend.name!r}: swiglu_limit({config}, {layer_idx}, shared={shared}) = {got!r}, "
        f"expected {expected!r}",
    )


def _check_off(backend, label, config, layer_idx, shared, *, clause, index_error=False):
    """swiglu_limit gives None (no clamp); with ``index_error`` an IndexError conforms too."""
    try:
        got = backend.swiglu_limit(config, layer_idx, shared=shared)
    except IndexError:
        if index_error:
            return
        raise
    check(
        got is None,
        clause=clause,
        message=f"backend {backend.name!r}: swiglu_limit({config}, {layer_idx}, shared={shared}) = {got!r} "
        f"({label}), expected None: the clamp must be off",
    )


@pytest.mark.clause("ACT-LIMIT-CONFIG-OFF")
@pytest.mark.op("swiglu_limit")
@pytest.mark.parametrize("label, config, layer_idx, shared", DISABLED, ids=[c[0] for c in DISABLED])
def test_limit_disabled_by_config(backend, device, label, config, layer_idx, shared):
    """A zero, a None value, a missing key or a None list gives None; past a short list None or IndexError."""
    short = label.startswith("short")
    _check_off(backend, label, config, layer_idx, shared, clause="ACT-LIMIT-CONFIG-OFF", index_error=short)


@pytest.mark.clause("ACT-LIMIT-CONFIG-ROBUST")
@pytest.mark.op("swiglu_limit")
@pytest.mark.parametrize("label, config, layer_idx, shared", ROBUST, ids=[c[0] for c in ROBUST])
def test_should_turn_the_clamp_off_for_a_negative_limit_or_a_short_list(
    backend, device, label, config, layer_idx, shared
):
    """A negative value, or a list shorter than the layer index, gives None."""
    _check_off(backend, label, config, layer_idx, shared, clause="ACT-LIMIT-CONFIG-ROBUST")


# transformers' own Step-3.5 config class: (kwargs, expected routed limits, expected shared limits).
TRANSFORMERS_LIMITS = [
    (dict(num_hidden_layers=2, swiglu_limits=[0.0, 7.0], swiglu_limits_shared=[16, 0]),
     [None, 7.0], [16.0, None]),
    # A hub config padded with one MTP entry: transformers trims it, and layer 2's limit is None.
    (dict(num_hidden_layers=3, num_nextn_predict_layers=1, swiglu_limits=[0.0, 7.0, None, 5.0],
          swiglu_limits_shared=[None, 16.0, 0, 2.0]), [None, 7.0, None], [None, 16.0, None]),
]  # fmt: skip


@pytest.mark.clause("ACT-LIMIT-CONFIG", "ACT-LIMIT-CONFIG-OFF")
@pytest.mark.op("swiglu_limit")
@pytest.mark.parametrize("kwargs, routed, shared", TRANSFORMERS_LIMITS)
def test_limit_from_transformers_config(backend, device, kwargs, routed, shared):
    """transformers' Step3p7TextConfig (Step-3.5) gives each layer's limits as the written-out lists say."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    config_class = getattr(transformers, "Step3p7TextConfig", None)
    if config_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no Step3p7TextConfig")
    config = config_class(**kwargs)
    got = [[backend.swiglu_limit(config, i, shared=s) for i in range(len(routed))] for s in (False, True)]
    check(
        got == [routed, shared],
        clause="ACT-LIMIT-CONFIG",
        message=f"backend {backend.name!r}: Step3p7TextConfig({kwargs}) gives routed/shared limits {got}, "
        f"expected {[routed, shared]}",
    )


@pytest.mark.clause("ACT-LIMIT-CONFIG-LAYER")
@pytest.mark.op("swiglu_limit")
@given(recipe=gated_inputs(scales=(3.0, 10.0), max_numel=1 << 12), case=limit_configs(), shared=st.booleans())
def test_layer_from_config_clamps_with_its_limit(backend, device, recipe, case, shared):
    """swiglu_step_and_mul with the backend's selected limit equals the oracle with the oracle's."""
    config, layer_idx = case
    reason = not_implemented_reason(backend, "swiglu_step_and_mul")
    if reason:
        pytest.skip(f"the layer needs swiglu_step_and_mul: {reason}")
    limit = backend.swiglu_limit(config, layer_idx, shared=shared)
    want_limit = oracle.swiglu_limit(config, layer_idx, shared=shared)
    x = recipe.make(device)
    assert_close(
        backend.swiglu_step_and_mul(x, limit=limit),
        oracle.swiglu_step_and_mul(x.cpu(), limit=want_limit),
        clause="ACT-LIMIT-CONFIG-LAYER",
        family=FAMILY,
        dtype=x.dtype,
        device=device,
        atol_scale=up_scale(x, limit=want_limit),
        context=describe(backend, device, "swiglu_step_and_mul", limit=limit)
        + f" from swiglu_limit({config}, {layer_idx}, shared={shared}); the oracle selects {want_limit!r}",
    )


GELU_VARIANTS = [
    pytest.param(op, marks=pytest.mark.op(op), id=op) for op in ("new_gelu", "fast_gelu", "quick_gelu")
]


@pytest.mark.clause("ACT-GELU-VARIANTS")
@pytest.mark.parametrize("op", GELU_VARIANTS)
@given(recipe=gated_inputs(scales=(1.0, 3.0, 10.0), max_numel=1 << 14))  # elementwise: size is moot
def test_gelu_variant_matches_its_formula(backend, device, op, recipe):
    """new_gelu, fast_gelu and quick_gelu each equal their own formula, elementwise."""
    x = recipe.make(device)
    _matches_oracle(backend, device, op, x, clause="ACT-GELU-VARIANTS", atol_scale=rounded_atol_scale(op, x))


@pytest.mark.clause("ACT-SITU")
@pytest.mark.op("situ_and_mul")
@given(recipe=gated_inputs(scales=SITU_SCALES), beta=situ_betas(), linear_beta=situ_linear_betas())
def test_situ_matches_oracle(backend, device, recipe, beta, linear_beta):
    """beta tanh(gate / beta) sigmoid(gate) times linear_beta tanh(up / linear_beta) (up when None)."""
    x = recipe.make(device)
    options = {"beta": beta, "linear_beta": linear_beta}
    scale = situ_up_scale(x, **options)
    _matches_oracle(backend, device, "situ_and_mul", x, clause="ACT-SITU", atol_scale=scale, **options)


@pytest.mark.clause("ACT-SITU-BOUND")
@pytest.mark.op("situ_and_mul")
@given(
    recipe=gated_inputs(scales=(10.0, 20.0), max_numel=1 << 12),
    beta=situ_betas(),
    linear_beta=clamp_limits(low=1.0, high=40.0),
)
def test_situ_is_bounded(backend, device, recipe, beta, linear_beta):
    """With linear_beta set, every output lies within beta * linear_beta (up to one rounding)."""
    x = recipe.make(device)
    out = backend.situ_and_mul(x, beta=beta, linear_beta=linear_beta)
    bound = situ_bound(beta, linear_beta, x.dtype)
    worst = out.detach().double().abs().max().item()
    check(
        worst <= bound,
        clause="ACT-SITU-BOUND",
        message=f"{describe(backend, device, 'situ_and_mul', beta=beta, linear_beta=linear_beta)}: "
        f"max |out| = {worst!r} exceeds beta * linear_beta = {beta * linear_beta!r} (bound {bound!r})",
    )


@pytest.mark.clause("ACT-CLAMP-NO-DEFAULT")
@pytest.mark.op("situ_and_mul")
@pytest.mark.parametrize("given_options", [{"linear_beta": 25.0}, {"beta": 4.0}, {}], ids=str)
def test_situ_requires_beta_and_linear_beta(backend, device, given_options):
    """situ_and_mul without beta or without linear_beta raises TypeError: neither has a default."""
    x = torch.ones(2, 4, device=device)
    try:
        backend.situ_and_mul(x, **given_options)
    except TypeError:
        return
    except Exception as error:  # noqa: BLE001 - any other outcome breaks the clause
        outcome = f"raised {type(error).__name__}: {error}"
    else:
        outcome = "returned a result (a default was applied)"
    check(
        False,
        clause="ACT-CLAMP-NO-DEFAULT",
        message=f"backend {backend.name!r}: situ_and_mul(x, **{given_options}) {outcome}",
    )

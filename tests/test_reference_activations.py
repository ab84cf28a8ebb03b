"""The activation oracles against independent formulations: math.erf/tanh per element, and F.gelu/F.silu."""

from __future__ import annotations

import math
from operator import attrgetter

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.bad_input.activations import ERRORS
from reference import activations as oracle

# No example may fail for the machine's speed: the first torch call of a process pays torch's lazy
# start-up (about 1 s), and a loaded machine multiplies that (Hypothesis's default deadline is 200 ms).
NO_DEADLINE = settings(deadline=None)
finite = st.floats(-30, 30, allow_nan=False)
pairs = st.lists(st.tuples(finite, finite), min_size=1, max_size=16)


def gelu_scalar(v: float, approximate: str) -> float:
    """GELU of one float, written from the spec text with the math module."""
    if approximate == "none":
        return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


def silu_scalar(v: float) -> float:
    return v / (1.0 + math.exp(-v)) if v > -700 else 0.0


def as_gated(rows: list[tuple[float, float]]) -> torch.Tensor:
    left, right = zip(*rows, strict=True)
    return torch.tensor([*left, *right], dtype=torch.float64)


@NO_DEADLINE
@given(rows=pairs, approximate=st.sampled_from(oracle.APPROXIMATE_MODES))
def test_gelu_and_mul_matches_scalar_definition(rows, approximate):
    """gelu_and_mul equals gelu(left) * right computed element by element with math.erf/math.tanh."""
    got = oracle.gelu_and_mul(as_gated(rows), approximate=approximate)
    want = torch.tensor([gelu_scalar(g, approximate) * u for g, u in rows], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@NO_DEADLINE
@given(rows=pairs, limit=st.one_of(st.none(), st.floats(0.01, 50)))
def test_swiglu_step_matches_scalar_definition(rows, limit):
    """swiglu_step_and_mul equals min(silu(gate), limit) * clip(up, -limit, limit), element by element."""
    got = oracle.swiglu_step_and_mul(as_gated(rows), limit=limit)
    if limit is None:
        want = [silu_scalar(g) * u for g, u in rows]
    else:
        want = [min(silu_scalar(g), limit) * max(-limit, min(u, limit)) for g, u in rows]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)


@NO_DEADLINE
@given(rows=pairs)
def test_silu_and_mul_matches_scalar_definition(rows):
    """silu_and_mul equals silu(gate) * up element by element."""
    got = oracle.silu_and_mul(as_gated(rows))
    want = torch.tensor([silu_scalar(g) * u for g, u in rows], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("approximate", oracle.APPROXIMATE_MODES)
def test_gelu_matches_torch_functional(approximate):
    """The float64 oracle agrees with torch.nn.functional.gelu (a peer) in float64."""
    x = torch.linspace(-12, 12, 20001, dtype=torch.float64)
    torch.testing.assert_close(
        oracle.gelu(x, approximate), F.gelu(x, approximate=approximate), rtol=1e-12, atol=1e-14
    )


def test_silu_matches_torch_functional():
    """The float64 oracle agrees with torch.nn.functional.silu, also at the infinities."""
    x = torch.cat([torch.linspace(-40, 40, 20001, dtype=torch.float64), torch.tensor([-math.inf, math.inf])])
    torch.testing.assert_close(oracle.silu(x), F.silu(x), rtol=1e-12, atol=1e-14, equal_nan=True)


def test_gelu_modes_differ_where_the_spec_says():
    """The two GELU modes differ by at most 4.7e-4, above 3e-5 in most of the ACT-GEGLU-MODES band."""
    x = torch.linspace(-10, 10, 200001, dtype=torch.float64)
    gap = (oracle.gelu(x, "none") - oracle.gelu(x, "tanh")).abs()
    assert 4.6e-4 < gap.max().item() < 4.8e-4
    band = (x.abs() >= 1.0) & (x.abs() <= 3.5)
    assert (gap[band] > 3e-5).double().mean().item() > 0.8


def test_silu_minimum():
    """silu's minimum is about -0.27846 near -1.2785 (the ACT-SWIGLU-STEP-BOUND threshold)."""
    x = torch.linspace(-3, 0, 300001, dtype=torch.float64)
    values = oracle.silu(x)
    assert abs(values.min().item() + 0.27846) < 1e-5
    assert abs(x[values.argmin()].item() + 1.2785) < 1e-3


def test_oracles_return_float64_on_input_device():
    """Oracles compute and return float64 whatever the input dtype."""
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    for out in (
        oracle.gelu_and_mul(x, approximate="tanh"),
        oracle.silu_and_mul(x),
        oracle.swiglu_step_and_mul(x, limit=1.0),
    ):
        assert out.dtype == torch.float64 and out.shape == (3, 4) and out.device == x.device


def test_npu_geglu_args():
    """ACT-GEGLU-NPU-ARGS, literally."""
    assert oracle.npu_geglu_args("tanh") == {"dim": -1, "approximate": 1, "activate_left": True}
    assert oracle.npu_geglu_args("none") == {"dim": -1, "approximate": 0, "activate_left": True}


@pytest.mark.parametrize(
    "call, exception, words",
    [
        (lambda: oracle.gelu_and_mul(torch.ones(0), approximate="none"), ValueError, "x.shape[-1]"),
        (
            lambda: oracle.gelu_and_mul(torch.ones(4, dtype=torch.bool), approximate="none"),
            TypeError,
            "floating",
        ),
        (lambda: oracle.gelu_and_mul([1.0, 2.0], approximate="none"), TypeError, "torch.Tensor"),
        (lambda: oracle.gelu_and_mul(torch.ones(4), approximate=None), ValueError, "approximate"),
        (lambda: oracle.npu_geglu_args("erf"), ValueError, "approximate"),
        (lambda: oracle.swiglu_step_and_mul(torch.ones(4), limit=True), ValueError, "limit"),
        (lambda: oracle.swiglu_step_and_mul(torch.ones(4), limit="7"), ValueError, "limit"),
        (lambda: oracle.swiglu_step_and_mul(torch.ones(4), limit=torch.tensor(7.0)), ValueError, "limit"),
    ],
)
def test_oracle_errors_name_the_argument(call, exception, words):
    """ACT-ERRORS: the exception type is the documented one and the message names the argument."""
    with pytest.raises(exception, match=words.replace("[", r"\[").replace("]", r"\]")):
        call()


@pytest.mark.parametrize("case", ERRORS, ids=attrgetter("id"))
def test_oracle_raises_the_shared_error_cases(case):
    """ACT-ERRORS: every shared bad-input record (the ones backends are held to) raises the
    record's exception type with a message naming the argument."""
    with pytest.raises(case.exception, match=case.match):
        case.call(oracle)


def test_swiglu_step_limit_is_required():
    """ACT-SWIGLU-STEP: there is no default limit."""
    with pytest.raises(TypeError):
        oracle.swiglu_step_and_mul(torch.ones(4))  # type: ignore[call-arg]


@settings(max_examples=20, deadline=None)
@given(limit=st.floats(0.2785, 20), seed=st.integers(0, 1000))
def test_swiglu_step_bound_holds_for_the_oracle(limit, seed):
    """ACT-SWIGLU-STEP-BOUND holds for the oracle itself, so the property is satisfiable."""
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 30
    assert oracle.swiglu_step_and_mul(x, limit=limit).abs().max().item() <= limit * limit


# --- the clamped look-alikes and the limit's selection ---------------------------------


def clip(v: float, limit: float | None, *, low: bool) -> float:
    if limit is None:
        return v
    return max(-limit, min(v, limit)) if low else min(v, limit)


@NO_DEADLINE
@given(rows=pairs, limit=st.one_of(st.none(), st.floats(0.01, 50)))
def test_silu_clamped_matches_scalar_definition(rows, limit):
    """ACT-SILU-CLAMPED: silu(min(gate, limit)) * clip(up, -limit, limit), element by element."""
    got = oracle.silu_clamped_and_mul(as_gated(rows), limit=limit)
    want = [silu_scalar(clip(g, limit, low=False)) * clip(u, limit, low=True) for g, u in rows]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def oai_scalar(g: float, u: float, alpha: float, limit: float | None) -> float:
    """gpt-oss GptOssExperts: g * sigmoid(alpha g) * (u + 1) after the clamps, with the math module."""
    g, u = clip(g, limit, low=False), clip(u, limit, low=True)
    z = alpha * g
    sigmoid = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
    return g * sigmoid * (u + 1.0)


@NO_DEADLINE
@given(
    rows=pairs,
    alpha=st.floats(0.1, 4),
    limit=st.one_of(st.none(), st.just(7.0), st.floats(0.01, 50)),
    interleaved=st.booleans(),
)
def test_swiglu_oai_matches_scalar_definition(rows, alpha, limit, interleaved):
    """ACT-SWIGLU-OAI: interleaved [g0, u0, g1, u1, ...] or halves [g..., u...]."""
    flat = [v for pair in rows for v in pair]
    x = torch.tensor(flat, dtype=torch.float64) if interleaved else as_gated(rows)
    got = oracle.swiglu_oai_and_mul(x, alpha=alpha, limit=limit, interleaved=interleaved)
    want = [oai_scalar(g, u, alpha, limit) for g, u in rows]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_clamped_oracles_have_no_defaults():
    """ACT-CLAMP-NO-DEFAULT: limit (and alpha, interleaved) must be passed."""
    with pytest.raises(TypeError):
        oracle.silu_clamped_and_mul(torch.ones(4))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        oracle.swiglu_oai_and_mul(torch.ones(4), alpha=1.702, interleaved=True)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "config, layer_idx, shared, expected",
    [
        ({"swiglu_limits": [0.0, 7.0], "swiglu_limits_shared": [16.0, -1.0]}, 1, False, 7.0),
        ({"swiglu_limits": [0.0, 7.0], "swiglu_limits_shared": [16.0, -1.0]}, 1, True, None),
        ({"swiglu_limits": [0.0, 7.0], "swiglu_limits_shared": [16.0, -1.0]}, 0, True, 16.0),
        ({"swiglu_limits": [0.0, 7.0]}, 0, False, None),
        ({"swiglu_limits": [0.0, 7.0]}, 5, False, None),
        ({"swiglu_limits": [7]}, 0, True, None),
        ({"swiglu_limits": [None, 2]}, 0, False, None),
        ({"swiglu_limits": None}, 0, False, None),
    ],
)
def test_swiglu_limit_selection(config, layer_idx, shared, expected):
    """ACT-LIMIT-CONFIG / -OFF on hand-written configs."""
    assert oracle.swiglu_limit(config, layer_idx, shared=shared) == expected


def test_oracle_matches_the_gpt_oss_expression():
    """ACT-SWIGLU-OAI: the oracle equals the transformers GptOssExperts expression written with torch."""
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 8
    gate, up = x[..., ::2].clamp(min=None, max=7.0), x[..., 1::2].clamp(min=-7.0, max=7.0)
    want = (up + 1) * (gate * torch.sigmoid(gate * 1.702))
    got = oracle.swiglu_oai_and_mul(x, alpha=1.702, limit=7.0, interleaved=True)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)


@NO_DEADLINE
@given(values=st.lists(finite, min_size=1, max_size=16))
def test_gelu_variants_match_scalar_definitions(values):
    """ACT-GELU-VARIANTS: NewGELU and FastGELU are the tanh GELU; QuickGELU is x * sigmoid(1.702 x)."""
    x = torch.tensor(values, dtype=torch.float64)
    tanh_gelu = torch.tensor([gelu_scalar(v, "tanh") for v in values], dtype=torch.float64)
    quick = torch.tensor(
        [v / (1.0 + math.exp(-1.702 * v)) if v > -400 else 0.0 for v in values], dtype=torch.float64
    )
    torch.testing.assert_close(oracle.new_gelu(x), tanh_gelu, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(oracle.fast_gelu(x), tanh_gelu, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(oracle.quick_gelu(x), quick, rtol=1e-12, atol=1e-12)


def situ_scalar(gate: float, up: float, beta: float, linear_beta: float | None) -> float:
    """ACT-SITU for one (gate, up) pair, written from the spec text with the math module."""
    sigmoid = 1.0 / (1.0 + math.exp(-gate)) if gate > -700 else 0.0
    u = up if linear_beta is None else linear_beta * math.tanh(up / linear_beta)
    return beta * math.tanh(gate / beta) * sigmoid * u


@NO_DEADLINE
@given(
    values=pairs,
    beta=st.sampled_from((4.0, 0.5, 2.5)),
    linear_beta=st.sampled_from((25.0, None, 1.5)),
)
def test_situ_matches_scalar_definition(values, beta, linear_beta):
    """ACT-SITU: the oracle equals the per-element formula; |out| < beta * linear_beta (ACT-SITU-BOUND)."""
    x = torch.tensor([g for g, _ in values] + [u for _, u in values], dtype=torch.float64)
    want = torch.tensor([situ_scalar(g, u, beta, linear_beta) for g, u in values], dtype=torch.float64)
    got = oracle.situ_and_mul(x, beta=beta, linear_beta=linear_beta)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    if linear_beta is not None:
        assert got.abs().max().item() < beta * linear_beta


def test_situ_clips_the_gate_not_silu_output():
    """ACT-SITU: at gate 2, beta 4 the gate clip and the clip of silu's output differ by about 0.028."""
    x = torch.tensor([2.0, 1.0], dtype=torch.float64)
    gate_clip = 4.0 * math.tanh(0.5) / (1.0 + math.exp(-2.0))
    silu_clip = 4.0 * math.tanh(2.0 / (1.0 + math.exp(-2.0)) / 4.0)
    got = oracle.situ_and_mul(x, beta=4.0, linear_beta=None).item()
    assert got == pytest.approx(gate_clip, rel=1e-14)
    assert abs(got - silu_clip) > 0.02


def test_situ_has_no_defaults():
    """ACT-CLAMP-NO-DEFAULT: the oracle takes beta and linear_beta only as explicit keywords."""
    with pytest.raises(TypeError):
        oracle.situ_and_mul(torch.ones(4), beta=4.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        oracle.situ_and_mul(torch.ones(4), linear_beta=25.0)  # type: ignore[call-arg]

"""The activation contracts against the field's own code: transformers' activation modules run in
their dtype through the suite's properties (ACT-TOL-ROUNDED), CANN's FastGelu as emulated
(ACT-GELU-NPU-OPS), a config limit returned as given (ACT-LIMIT-CONFIG), and ACT-NAN's failure line."""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from hypothesis import settings

import conformance.harness.profiles  # noqa: F401 - registers the opconform-* profiles
from conformance.checks import ConformanceError, assert_close
from reference import activations as oracle


# ACT-TOL-ROUNDED: transformers' own activation code, run in x's dtype as written (every step
# rounded), is a correct low-precision implementation: the suite's properties must pass it.
class TransformersActivations:
    """NewGELUActivation, FastGELUActivation, QuickGELUActivation and GptOssExperts._apply_gate,
    called as a model calls them (GptOssExperts reads alpha and limit from its config)."""

    name = "transformers-activations"

    def __init__(self):
        from transformers import activations

        self.modules = {
            "new_gelu": activations.NewGELUActivation(),
            "fast_gelu": activations.FastGELUActivation(),
            "quick_gelu": activations.QuickGELUActivation(),
        }
        self.experts = {}

    def unavailable(self, device):
        return None

    def new_gelu(self, x):
        return self.modules["new_gelu"](x)

    def fast_gelu(self, x):
        return self.modules["fast_gelu"](x)

    def quick_gelu(self, x):
        return self.modules["quick_gelu"](x)

    def swiglu_oai_and_mul(self, x, *, alpha, limit, interleaved):
        from transformers import GptOssConfig
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

        limit = math.inf if limit is None else limit  # clamp(max=inf) is no clamp
        if (alpha, limit) not in self.experts:
            config = GptOssConfig(swiglu_alpha=alpha, swiglu_limit=limit, num_local_experts=1, hidden_size=2,
                                  intermediate_size=1, num_attention_heads=1, num_key_value_heads=1,
                                  head_dim=2, num_hidden_layers=1)  # fmt: skip
            self.experts[alpha, limit] = GptOssExperts(config)
        if not interleaved:  # the gpt-oss layer reads gate and up interleaved: interleave the halves
            x = torch.stack(x.tensor_split(2, dim=-1), dim=-1).flatten(-2)
        return self.experts[alpha, limit]._apply_gate(x)


PEER_OPS = ("new_gelu", "fast_gelu", "quick_gelu", "swiglu_oai_and_mul")
# (module, property, ops it is called for): every property comparing these ops with the oracle.
PEER_PROPERTIES = [
    ("test_activations_clamped", "test_gelu_variant_matches_its_formula", PEER_OPS[:3]),
    ("test_activations_clamped", "test_swiglu_oai_matches_oracle", (None,)),
    ("test_activations_clamped", "test_swiglu_oai_interleaved_is_deinterleaved_halves", (None,)),
    ("test_activations_clamped", "test_clamped_op_without_limit_does_not_clamp", PEER_OPS[3:]),
    ("test_activations", "test_gated_nan_propagates", PEER_OPS),
    ("test_activations", "test_should_accept_views", PEER_OPS),
]
PEER_CASES = [
    pytest.param(module, prop, op, id=f"{prop}-{op}" if op else prop)
    for module, prop, ops in PEER_PROPERTIES
    for op in ops
]


@pytest.fixture(scope="module")
def transformers_peer():
    pytest.importorskip("transformers", reason="transformers (peers extra) is not installed")
    return TransformersActivations()


@pytest.mark.parametrize("module, prop, op", PEER_CASES)
def test_transformers_activations_conform_in_their_dtype(transformers_peer, module, prop, op):
    """ACT-TOL-ROUNDED: transformers' modules in float32, float16 and bfloat16 pass the suite's own
    properties (ACT-GELU-VARIANTS, ACT-SWIGLU-OAI(-LAYOUT), ACT-CLAMP-NO-DEFAULT, ACT-NAN,
    ACT-VIEWS) over the examples those properties draw in the ci profile (derandomized: the
    same function, so the same examples). Under the two-rounding table alone they failed."""
    test = getattr(importlib.import_module(f"conformance.{module}"), prop)
    # @given takes its settings when the module is imported (the plugin imports the suite's modules
    # under the suite's profile); pin the ci profile's for this call and restore them after.
    attached = test._hypothesis_internal_use_settings
    test._hypothesis_internal_use_settings = settings.get_profile("opconform-ci")
    try:
        test(backend=transformers_peer, device=torch.device("cpu"), **({"op": op} if op else {}))
    finally:
        test._hypothesis_internal_use_settings = attached


def _act_nan_failure(got: torch.Tensor, want: torch.Tensor) -> str:
    with pytest.raises(ConformanceError) as failure:
        assert_close(got, want, clause="ACT-NAN", family="activations", context="silu_and_mul")
    return str(failure.value)


def test_act_nan_failure_line_names_a_real_violation():
    """ACT-NAN: the largest violation the failure names is an element outside the tolerance (a
    finite error, or a number where NaN is expected), never the NaN position both sides share."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    x[0, 0] = float("nan")  # feeds output (0, 0)
    want = oracle.silu_and_mul(x)
    got = want.float()
    got[2, 3] += 1.0
    message = _act_nan_failure(got, want)
    assert "1 of 16 elements" in message and "largest violation at index (2, 3): abs 1," in message, message
    got = want.float()
    got[0, 0] = 0.5  # a number where the NaN must come out
    message = _act_nan_failure(got, want)
    assert "largest violation at index (0, 0): a NaN or inf mismatch" in message, message
    assert "got 0.5, expected nan" in message, message
    got = want.float()
    got[1, 1] = float("nan")  # NaN where a number is expected
    message = _act_nan_failure(got, want)
    assert "largest violation at index (1, 1): a NaN or inf mismatch" in message, message


class _LimitAsGiven:
    """swiglu_limit returning the config's value as it is (an int stays an int): correct."""

    name = "limit-as-given"

    def __init__(self, convert=lambda value: value):
        self.convert = convert

    def swiglu_limit(self, config, layer_idx, *, shared):
        limit = oracle.swiglu_limit(config, layer_idx, shared=shared)
        if limit is None:
            return None
        value = config[oracle.LIMIT_KEYS[shared]][layer_idx]
        return self.convert(value)


def test_integer_limit_from_a_config_conforms():
    """ACT-LIMIT-CONFIG: a backend returning a config's integer limit 3 as an int passes the
    property (it required a float); one returning True for a limit of 1 fails it."""
    from conformance.test_activations_clamped import SELECTED, test_limit_selected_from_config

    assert any(isinstance(case[-1], int) for case in SELECTED)
    for case in SELECTED:
        test_limit_selected_from_config(_LimitAsGiven(), "cpu", *case)
        test_limit_selected_from_config(_LimitAsGiven(float), "cpu", *case)
    assert oracle.swiglu_limit({"swiglu_limits": [3]}, 0, shared=False) == 3
    with pytest.raises(ConformanceError, match=r"^\[ACT-LIMIT-CONFIG\] .* = True, expected 1"):
        test_limit_selected_from_config(_LimitAsGiven(bool), "cpu", {"swiglu_limits": [1]}, 0, False, 1)


def test_npu_gelu_variant_args():
    """ACT-GELU-NPU-OPS, literally; a name outside the three is a ValueError naming op."""
    tanh = {"op": "npu_gelu", "approximate": "tanh"}
    assert oracle.npu_gelu_variant_args("new_gelu") == oracle.npu_gelu_variant_args("fast_gelu") == tanh
    assert oracle.npu_gelu_variant_args("quick_gelu") == {"op": "npu_fast_gelu"}
    with pytest.raises(ValueError, match="op must be one of"):
        oracle.npu_gelu_variant_args("gelu_fast")


def test_emulated_npu_fast_gelu_is_quick_gelu_not_fast_gelu():
    """spec/ascend.md CANN-FAST-GELU: the emulated npu_fast_gelu equals both documented formulas,
    i.e. QuickGELU (one float32 rounding), and is up to 0.021 away from transformers' tanh FastGELU;
    CANN-GELU: npu_gelu is the erf GELU by default and the tanh GELU with approximate="tanh"."""
    from backends.npu_emulator import npu_fast_gelu, npu_gelu

    x = torch.linspace(-10, 10, 20001, dtype=torch.float64).float()
    got = npu_fast_gelu(x).double()
    v = x.double()
    stable = v / (1 + torch.exp(-1.702 * v.abs())) * torch.exp(0.851 * (v - v.abs()))
    torch.testing.assert_close(got, stable, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got, v / (1 + torch.exp(-1.702 * v)), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got, oracle.quick_gelu(x), rtol=1e-6, atol=1e-7)
    assert 0.02 < (got - oracle.fast_gelu(x)).abs().max().item() < 0.022
    torch.testing.assert_close(
        npu_gelu(x, approximate="tanh").double(),
        oracle.new_gelu(x),
        rtol=1e-6,
        atol=2e-7,  # float32 1 + tanh is 0 below x = -5: exact 1.5e-7
    )
    erf_gelu = 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))
    # float32 x * (1 + erf) cancels for x < -4: an absolute error of |x| ulps of 1 (measured 1.0e-6)
    torch.testing.assert_close(npu_gelu(x).double(), erf_gelu, rtol=1e-6, atol=2e-6)
    assert npu_fast_gelu(x.half()).dtype == torch.float16

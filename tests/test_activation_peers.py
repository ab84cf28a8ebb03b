"""The activation contracts against the field's own code: transformers' activation modules run in
their dtype through the suite's properties (ACT-TOL-ROUNDED), CANN's FastGelu as emulated
(ACT-GELU-NPU-OPS), a config limit returned as given (ACT-LIMIT-CONFIG), and ACT-NAN's failure line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from suite_runner import run_suite

from conformance.checks import ConformanceError, assert_close
from reference import activations as oracle

# ACT-TOL-ROUNDED: transformers' own activation code, run in x's dtype as written (every step
# rounded), is a correct low-precision implementation: the suite's properties must pass it.
TRANSFORMERS_PEERS = '''
import functools
import math

import torch
from transformers import GptOssConfig
from transformers.activations import FastGELUActivation, NewGELUActivation, QuickGELUActivation
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts


@functools.cache
def experts(alpha, limit):
    """GptOssExperts reads alpha and limit from its config (transformers 5.x)."""
    config = GptOssConfig(swiglu_alpha=alpha, swiglu_limit=limit, num_local_experts=1, hidden_size=2,
                          intermediate_size=1, num_attention_heads=1, num_key_value_heads=1, head_dim=2,
                          num_hidden_layers=1)
    return GptOssExperts(config)


class TransformersActivations:
    name = "transformers-activations"

    def unavailable(self, device):
        return None if device.type == "cpu" else "the peers run on cpu here"

    def new_gelu(self, x):
        return NewGELUActivation()(x)

    def fast_gelu(self, x):
        return FastGELUActivation()(x)

    def quick_gelu(self, x):
        return QuickGELUActivation()(x)

    def swiglu_oai_and_mul(self, x, *, alpha, limit, interleaved):
        if not interleaved:  # the gpt-oss layer reads gate and up interleaved: interleave the halves
            x = torch.stack(x.tensor_split(2, dim=-1), dim=-1).flatten(-2)
        return experts(alpha, math.inf if limit is None else limit)._apply_gate(x)


BACKEND = TransformersActivations()
'''

# The properties that compare these four ops with the oracles (elsewhere they are not implemented).
PEER_PROPERTIES = [
    "conformance/test_activations_clamped.py::test_gelu_variant_matches_its_formula",
    "conformance/test_activations_clamped.py::test_swiglu_oai_matches_oracle",
    "conformance/test_activations_clamped.py::test_swiglu_oai_interleaved_is_deinterleaved_halves",
    "conformance/test_activations_clamped.py::test_clamped_op_without_limit_does_not_clamp",
    "conformance/test_activations.py::test_gated_nan_propagates",
    "conformance/test_activations.py::test_gated_output_layout",
]


def test_transformers_activations_conform_in_their_dtype(tmp_path):
    """ACT-TOL-ROUNDED: NewGELUActivation, FastGELUActivation, QuickGELUActivation and
    GptOssExperts._apply_gate in float32, float16 and bfloat16 pass ACT-GELU-VARIANTS,
    ACT-SWIGLU-OAI(-LAYOUT), ACT-CLAMP-NO-DEFAULT, ACT-NAN and ACT-LAYOUT over the examples those
    properties draw (the ci profile's). Under the two-rounding table alone they failed."""
    pytest.importorskip("transformers", reason="transformers (peers extra) is not installed")
    (tmp_path / "transformers_activations.py").write_text(TRANSFORMERS_PEERS)
    results = run_suite(
        tmp_path,
        paths=PEER_PROPERTIES,
        modules=["transformers_activations"],
        extra=["--device", "cpu"],
        pythonpath=[tmp_path, Path(__file__).resolve().parent],
    )
    by_outcome: dict[str, list[str]] = {}
    for case in results["results"]:
        by_outcome.setdefault(case["outcome"], []).append(case["nodeid"].rsplit("::", 1)[-1])
    assert set(by_outcome) <= {"passed", "not implemented"}, (by_outcome, results["stdout"][-4000:])
    passed = " ".join(by_outcome["passed"])
    for op in ("new_gelu", "fast_gelu", "quick_gelu", "swiglu_oai_and_mul"):
        assert f"test_gated_nan_propagates[transformers-activations-cpu-{op}]" in passed, by_outcome
    assert len(by_outcome["passed"]) == 3 + 1 + 1 + 1 + 4 + 4, by_outcome


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
    i.e. QuickGELU (one float32 rounding), and is up to 0.021 away from transformers' tanh FastGELU."""
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
    assert npu_fast_gelu(x.half()).dtype == torch.float16

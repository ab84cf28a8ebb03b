"""A property demands exactly what its clause says: no more (false alarms), no less."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from suite_runner import outcomes, run_suite

from conformance.checks import ConformanceError
from conformance.error_cases import ACTIVATION_ERRORS, check_backend_raises

WIDE_NEXT_TOKENS = """
from reference import masks


class WideNextTokens:
    '''Pairs W = None with a large next_tokens (a sparse mode that ignores it): WINDOW-CONV's table
    fixes only pre_tokens without a window.'''

    name = "wide-next-tokens"

    def unavailable(self, device):
        return None

    def cann_prefill_tokens(self, sliding_window):
        tokens = masks.cann_prefill_tokens(sliding_window)
        if sliding_window is None:
            tokens["next_tokens"] = masks.CANN_MAX_TOKENS
        return tokens


BACKEND = WideNextTokens()
"""


# matches-oracle property -> its clause, for a backend returning float64 for any x (right values).
WRONG_DTYPE_PROPERTIES = {
    "test_activations.py::test_geglu_matches_oracle": "ACT-GEGLU",
    "test_activations.py::test_silu_and_mul_matches_oracle": "ACT-SWIGLU",
    "test_activations_clamped.py::test_silu_clamped_matches_oracle": "ACT-SILU-CLAMPED",
}


def test_wrong_dtype_activation_fails_the_property_clause(tmp_path):
    """ACT-LAYOUT's dtype holds in every comparison with the oracle: an activation computed and
    returned in float64 (values right to float64 precision) fails ACT-GEGLU, ACT-SWIGLU and
    ACT-SILU-CLAMPED, each in one line naming the dtype that came back (it passed them before)."""
    results = run_suite(
        tmp_path,
        paths=[f"conformance/{test}" for test in WRONG_DTYPE_PROPERTIES],
        modules=["misbehaving_backends:WRONG_DTYPE_ACTIVATIONS"],
        extra=["--device", "cpu"],
        pythonpath=[Path(__file__).resolve().parent],
        profile="ci-noshrink",
    )
    failed = {}
    for case in results["results"]:
        test = case["nodeid"].split("[")[0].rsplit("/", 1)[-1]  # conformance/test_x.py::test_y
        lines = re.findall(r"ConformanceError: (\[[A-Z-]+\] .*)", case.get("message") or "")
        failure = case.get("failure") or {}
        failed[test] = (case["outcome"], failure.get("clause"), failure.get("dtype"), (lines or [""])[0])
    assert set(failed) == set(WRONG_DTYPE_PROPERTIES), failed
    for test, clause in WRONG_DTYPE_PROPERTIES.items():
        assert failed[test][:3] == ("failed", clause, "float64"), (test, failed[test])
        line = failed[test][3]
        assert line.startswith(f"[{clause}] ") and "dtype torch.float64 on cpu; expected a " in line, line
    assert results["returncode"] == 1, results["stdout"][-3000:]


def test_window_conv_leaves_next_tokens_free_without_a_window(tmp_path):
    """WINDOW-CONV: cann_prefill_tokens(None) with a large next_tokens conforms (only pre_tokens is fixed)."""
    (tmp_path / "wide_next_tokens.py").write_text(textwrap.dedent(WIDE_NEXT_TOKENS))
    results = run_suite(
        tmp_path,
        paths=["conformance/test_masks.py::test_window_converter"],
        modules=["wide_next_tokens"],
        extra=["--device", "cpu"],
        pythonpath=[tmp_path],
    )
    counts = outcomes(results, "wide-next-tokens")
    assert counts.get("passed") == 6 and "failed" not in counts, (counts, results["stdout"])


class _Raises:
    name = "raises"

    def __init__(self, exc):
        self.exc = exc

    def gelu_and_mul(self, x, *, approximate):
        raise self.exc


ODD_LAST_DIM = next(case for case in ACTIVATION_ERRORS if case.id == "gelu_and_mul-odd-last-dim")


def test_error_case_passes_a_message_naming_the_argument():
    check_backend_raises(ODD_LAST_DIM, _Raises(ValueError("x.shape[-1] must be even, got 5")), "cpu")


@pytest.mark.parametrize(
    "exc, words",
    [
        (ValueError("the last dimension must be even"), "name the argument"),  # names no argument
        (ValueError("max size must be even"), "name the argument"),  # 'x' only inside a word
        (TypeError("x.shape[-1] must be even"), "expected ValueError"),  # the wrong type
    ],
)
def test_error_case_fails_a_vague_message_or_a_wrong_type(exc, words):
    """ACT-ERRORS: the message names the argument, so a vague one fails the clause like a wrong type."""
    with pytest.raises(ConformanceError, match=rf"^\[ACT-ERRORS\] .*{words}"):
        check_backend_raises(ODD_LAST_DIM, _Raises(exc), "cpu")

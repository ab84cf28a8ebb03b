"""A property demands exactly what its clause says: no more (false alarms), no less."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from suite_runner import outcomes, run_suite

from conformance.bad_input import check_backend_raises
from conformance.bad_input.activations import ERRORS
from conformance.checks import ConformanceError
from conformance.strategies.masks import CONVERTER_WINDOWS
from reference.serving import window_keys

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


class FlashNoWindowUnbounded:
    '''vLLM's FlashAttention convention: window_size (-1, -1) without a window (causal=True).'''

    name = "flash-no-window-unbounded"

    def unavailable(self, device):
        return None

    def flash_attention_window(self, sliding_window):
        return (-1, -1) if sliding_window is None else masks.flash_attention_window(sliding_window)


class FlashNoWindowRightOpen(FlashNoWindowUnbounded):
    '''WRONG: (-1, 1) without a window also admits one future key.'''

    name = "flash-no-window-right-open"

    def flash_attention_window(self, sliding_window):
        return (-1, 1) if sliding_window is None else masks.flash_attention_window(sliding_window)


BACKEND = [WideNextTokens(), FlashNoWindowUnbounded(), FlashNoWindowRightOpen()]
"""


# SERVE-WINDOW-ARGS: adapters written from each API's own documented convention (spec/serving.md).
API_WINDOW_ADAPTERS = '''
from reference.masks import CANN_MAX_TOKENS


class FlashAttentionWindows:
    """vLLM's FlashAttention backend: window_size (-1, -1) without a window, (W - 1, 0) with one,
    on both paths (causal=True)."""

    name = "flash-attention-windows"

    def unavailable(self, device):
        return None

    def window_kernel_args(self, sliding_window):
        size = (-1, -1) if sliding_window is None else (sliding_window - 1, 0)
        return {"prefill": {"window_size": size}, "decode": {"window_size": size}}


class FiaWindows:
    """Ascend FIA: without a window the op's default pre/next tokens beside sparse_mode 3; with one
    the band (sparse_mode 4, pre_tokens W - 1, next_tokens 0); decode an explicit W-key mask."""

    name = "fia-windows"

    def unavailable(self, device):
        return None

    def window_kernel_args(self, sliding_window):
        if sliding_window is None:
            prefill = {"sparse_mode": 3, "pre_tokens": CANN_MAX_TOKENS, "next_tokens": CANN_MAX_TOKENS}
        else:
            prefill = {"sparse_mode": 4, "pre_tokens": sliding_window - 1, "next_tokens": 0}
        return {"prefill": prefill, "decode": {"left_context": sliding_window}}


class FiaCausalModeWithWindow(FiaWindows):
    """WRONG: sparse_mode 3 with pre_tokens W - 1: mode 3 ignores pre_tokens, so no window."""

    name = "fia-causal-mode-with-window"

    def window_kernel_args(self, sliding_window):
        args = super().window_kernel_args(sliding_window)
        args["prefill"]["sparse_mode"] = 3
        return args


BACKEND = [FlashAttentionWindows(), FiaWindows(), FiaCausalModeWithWindow()]
'''

WINDOW_ARGS_PROPERTY = "conformance/test_serving_windows.py::test_prefill_and_decode_keep_the_same_window"
WINDOW_CONV_PROPERTY = "conformance/test_masks.py::test_window_converter"


@pytest.fixture(scope="module")
def window_demands(tmp_path_factory):
    """One suite run (one subprocess) of the WINDOW-CONV and SERVE-WINDOW-ARGS properties against
    the window adapters of this module."""
    folder = tmp_path_factory.mktemp("window-demands")
    (folder / "wide_next_tokens.py").write_text(textwrap.dedent(WIDE_NEXT_TOKENS))
    (folder / "api_window_adapters.py").write_text(textwrap.dedent(API_WINDOW_ADAPTERS))
    return run_suite(
        folder, paths=[WINDOW_CONV_PROPERTY, WINDOW_ARGS_PROPERTY],
        modules=["wide_next_tokens", "api_window_adapters"], extra=["--device", "cpu"], pythonpath=[folder],
    )  # fmt: skip


def test_window_args_accept_each_apis_no_window_spelling(window_demands):
    """SERVE-WINDOW-ARGS: FlashAttention's (-1, -1) and FIA's default next_tokens beside sparse_mode 3
    are 'no window' and conform; pre_tokens beside sparse_mode 3 keeps no window and fails."""
    for name in ("flash-attention-windows", "fia-windows"):
        counts = outcomes(window_demands, name)
        assert counts.get("passed") == 8 and "failed" not in counts, (
            name,
            counts,
            window_demands["stdout"][-3000:],
        )
    wrong = outcomes(window_demands, "fia-causal-mode-with-window")
    assert wrong.get("passed") == 1 and wrong.get("failed") == 7, wrong  # only W = None passes


def _kept_by_band(low, high, query=4000, keys=8000) -> int | None:
    """Keys j with query + low <= j <= min(query, query + high) (a causal kernel); None if all of 0..query."""
    kept = [j for j in range(keys) if query + low <= j <= min(query, query + high)]
    return None if len(kept) == query + 1 else len(kept)


BIG = 2147483647
# (window arguments, their band (low, high) around the query, read from each API's documentation)
WINDOW_ARGS_BANDS = [
    ({"sliding_window": 5}, (-4, 0)),
    ({"sliding_window": None}, (-BIG, 0)),
    ({"window_size": (4, 0)}, (-4, 0)),
    ({"window_size": (0, 0)}, (0, 0)),
    ({"window_size": (-1, 0)}, (-BIG, 0)),
    ({"window_size": (-1, -1)}, (-BIG, BIG)),  # causal=True clips the right side to 0
    ({"window_left": 7}, (-7, 0)),
    ({"window_left": -1}, (-BIG, 0)),
    ({"pre_tokens": 3, "next_tokens": 0}, (-3, 0)),
    ({"pre_tokens": 3}, (-3, 0)),
    ({"sparse_mode": 4, "pre_tokens": 3, "next_tokens": 0}, (-3, 0)),
    ({"sparse_mode": 4, "pre_tokens": BIG, "next_tokens": 0}, (-BIG, 0)),
    ({"sparse_mode": 3, "pre_tokens": BIG, "next_tokens": BIG}, (-BIG, BIG)),  # mode 3: j <= i + d only
    ({"sparse_mode": 3, "pre_tokens": 3, "next_tokens": 0}, (-BIG, BIG)),  # pre_tokens ignored
    ({"sparse_mode": 3}, (-BIG, BIG)),
    ({"left_context": 6}, (-5, 0)),
    ({"left_context": None}, (-BIG, 0)),
]


@pytest.mark.parametrize("args, band", WINDOW_ARGS_BANDS, ids=[repr(a) for a, _ in WINDOW_ARGS_BANDS])
def test_window_keys_counts_each_apis_band(args, band):
    """SERVE-WINDOW-ARGS: window_keys equals the keys each API's documented band keeps, counted."""
    assert window_keys(args) == _kept_by_band(*band)


@pytest.mark.parametrize(
    "args, argument",
    [
        ({"window_size": (3, -1)}, "window_size"),  # keys after the query without causal's clipping
        ({"window_size": (3, 2)}, "window_size"),
        ({"window_size": 3}, "window_size"),
        ({"sparse_mode": 4, "pre_tokens": 3, "next_tokens": BIG}, "next_tokens"),  # future keys
        ({"sparse_mode": 0, "pre_tokens": 3, "next_tokens": 0}, "sparse_mode"),
        ({"sparse_mode": 4}, "pre_tokens"),
        ({"window_size": (3, 0), "pre_tokens": 3}, "window arguments"),
        ({"sliding_window": 3, "causal": True}, "window arguments"),
        ([3], "window arguments"),
    ],
)
def test_window_keys_rejects_other_arguments(args, argument):
    """SERVE-WINDOW-ARGS: arguments that are not one API's causal window raise, naming the argument."""
    with pytest.raises(ValueError, match=argument):
        window_keys(args)


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
        lines = re.findall(r"^(\[[A-Z-]+\] .*)", case.get("message") or "", re.M)  # the verdict
        failure = case.get("failure") or {}
        failed[test] = (case["outcome"], failure.get("clause"), failure.get("dtype"), (lines or [""])[0])
    assert set(failed) == set(WRONG_DTYPE_PROPERTIES), failed
    for test, clause in WRONG_DTYPE_PROPERTIES.items():
        assert failed[test][:3] == ("failed", clause, "float64"), (test, failed[test])
        line = failed[test][3]
        assert line.startswith(f"[{clause}] ") and "dtype torch.float64 on cpu; expected a " in line, line
    assert results["returncode"] == 1, results["stdout"][-3000:]


def test_window_conv_leaves_next_tokens_free_without_a_window(window_demands):
    """WINDOW-CONV: cann_prefill_tokens(None) with a large next_tokens conforms (only pre_tokens is fixed)."""
    counts = outcomes(window_demands, "wide-next-tokens")
    assert counts.get("passed") == len(CONVERTER_WINDOWS) and "failed" not in counts, (
        counts,
        window_demands["stdout"],
    )


def test_window_conv_accepts_flash_attentions_unbounded_no_window(window_demands):
    """WINDOW-CONV: flash_attention_window(None) = (-1, -1) (vLLM's spelling) conforms; (-1, 1) fails
    its None case only."""
    windows = len(CONVERTER_WINDOWS)
    counts = outcomes(window_demands, "flash-no-window-unbounded")
    assert counts.get("passed") == windows and "failed" not in counts, (counts, window_demands["stdout"])
    counts = outcomes(window_demands, "flash-no-window-right-open")
    assert counts.get("passed") == windows - 1 and counts.get("failed") == 1, (
        counts,
        window_demands["stdout"],
    )


class _Raises:
    name = "raises"

    def __init__(self, exc):
        self.exc = exc

    def gelu_and_mul(self, x, *, approximate):
        raise self.exc


ODD_LAST_DIM = next(case for case in ERRORS if case.id == "gelu_and_mul-odd-last-dim")


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

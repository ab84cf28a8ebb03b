"""The transformers peer's false alarms, settled: the field's correct code (tests/peer_conventions.py,
transcribed from the upstream code each class cites) passes the relaxed MUST clauses through
``--backend-module``, as a user's backend would, and fails only their SHOULD halves; each wrong twin
still fails a MUST clause."""

from __future__ import annotations

import convention_runs
import pytest
import torch
from peer_conventions import TransformersLlamaRotary
from suite_runner import failed_clauses

from conformance.test_rope import _check_cos_sin

CORRECT = ("transformers-step3p7-limits", "vllm-step3p5-limits", "transformers-sdpa-attention",
           "transformers-llama-rotary")  # fmt: skip


@pytest.fixture(scope="module")
def peer_run(tmp_path_factory):
    """This module's backends' cases of the shared convention run (tests/convention_runs.py)."""
    return convention_runs.part(tmp_path_factory, "peer")


def _outcomes(document: dict, backend: str, test: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for case in document["results"]:
        if case["backend"] == backend and f"::{test}[" in case["nodeid"]:
            counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
    return counts


def test_correct_field_code_breaks_no_must_clause(peer_run):
    """The transcriptions fail no MUST clause."""
    failed = failed_clauses(peer_run)
    assert not any(failed.get(name) for name in CORRECT), (failed, peer_run["stdout"][-4000:])


@pytest.mark.parametrize(
    "backend, test, outcomes",
    [
        ("transformers-step3p7-limits", "test_limit_disabled_by_config", {"passed": 8}),  # IndexError past
        ("transformers-step3p7-limits", "test_limit_from_transformers_config", {"passed": 2}),
        ("transformers-step3p7-limits", "test_layer_from_config_clamps_with_its_limit", {"passed": 1}),
        ("vllm-step3p5-limits", "test_limit_disabled_by_config", {"passed": 8}),  # None past a short list
        ("transformers-sdpa-attention", "test_additive_mask_in_query_dtype_equals_bool", {"passed": 1}),
        ("transformers-llama-rotary", "test_cos_sin_rows", {"passed": 1}),
        ("transformers-llama-rotary", "test_long_positions_keep_float32_angles", {"passed": 1}),
        # The SHOULD halves: transformers' negative limits and IndexErrors, vLLM's negative limits (its
        # routed assert, left out, would raise), the unchecked float32 mask.
        ("transformers-step3p7-limits", "test_should_turn_the_clamp_off_for_a_negative_limit_or_a_short_list",
         {"failed (SHOULD)": 4}),
        ("vllm-step3p5-limits", "test_should_turn_the_clamp_off_for_a_negative_limit_or_a_short_list",
         {"failed (SHOULD)": 2, "passed": 2}),
        ("transformers-sdpa-attention", "test_should_reject_a_float32_mask_with_half_queries",
         {"failed (SHOULD)": 2}),
    ],
)  # fmt: skip
def test_the_relaxed_cases_ran(peer_run, backend, test, outcomes):
    """Each relaxed clause judged the field's code (its cases ran, not skipped) with these outcomes."""
    assert _outcomes(peer_run, backend, test) == outcomes


def test_wrong_twins_still_fail_their_clauses(peer_run):
    """The relaxed clauses still catch a limit read past the list, an inverted float mask, bfloat16 angles."""
    failed = failed_clauses(peer_run)
    assert "ACT-LIMIT-CONFIG-OFF" in failed["wrong-limit-past-list-reads-last"], failed
    assert "ATTN-FLOAT-MASK" in failed["wrong-float-mask-as-bool"], failed
    assert failed["wrong-angles-in-bfloat16"] & {"ROPE-COS-SIN", "ROPE-LONG"}, failed


def test_float32_angles_of_a_float64_inv_freq_conform():
    """ROPE-COS-SIN: transformers' float32 angles of a float64 model's inv_freq, at long positions, pass."""
    args = (128, [0, 7, 100000, 262143], torch.float64, 1.35, torch.int64, False, "ROPE-COS-SIN")
    _check_cos_sin(TransformersLlamaRotary(), torch.device("cpu"), *args)

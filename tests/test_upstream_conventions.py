"""Released framework code the contract must accept, run through the suite as a user's backend
(``--backend-module``): vLLM 0.33's norm ops, dynamic NTK rope and Cohere2 windows (spec/norms.md
NORM-MIXED, spec/rope.md ROPE-FREQ-DYNAMIC, spec/serving.md SERVE-LAYER-WINDOWS), and vLLM 0.33's
dynamic NTK as Llama calls it, which must still fail (plain rope over a cache too short); the
transcriptions are in tests/upstream_backends.py."""

from __future__ import annotations

import convention_runs
import pytest
from suite_runner import failed_clauses, outcomes


@pytest.fixture(scope="module")
def upstream_run(tmp_path_factory):
    """This module's backends' cases of the shared convention run (tests/convention_runs.py): the norm,
    dynamic NTK and layer-window properties, SHOULD properties (bad input, which vLLM does not check) left
    out."""
    return convention_runs.part(tmp_path_factory, "upstream")


@pytest.mark.parametrize(
    "backend", ["vllm-0.33-norms", "vllm-0.33-dynamic-ntk-nomic-args", "vllm-0.33-cohere2-windows"]
)
def test_vllm_033_passes_the_must_clauses(upstream_run, backend):
    """vLLM 0.33's norm ops (a float32 x with a bfloat16 weight rounded to bfloat16), its dynamic NTK
    with NomicBert's arguments and its Cohere2 W + 1 windows pass every property they are drawn in."""
    counts = outcomes(upstream_run, backend)
    assert counts.get("passed", 0) > 0 and "failed" not in counts, (counts, upstream_run["stdout"][-3000:])


def test_vllm_033_dynamic_ntk_as_llama_calls_it_still_fails(upstream_run):
    """Plain rope for a sequence past max_position_embeddings (vLLM 0.33 with Llama's arguments,
    whose cache is that long) is still a ROPE-FREQ-DYNAMIC failure."""
    broken = failed_clauses(upstream_run).get("vllm-0.33-dynamic-ntk-llama-args", set())
    assert "ROPE-FREQ-DYNAMIC" in broken, upstream_run["stdout"][-3000:]

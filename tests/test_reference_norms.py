"""The norm oracles against independent formulations: per-row loops with math.fsum, and
transformers' LlamaRMSNorm / GemmaRMSNorm / Gemma2RMSNorm modules as peers."""

from __future__ import annotations

import math
from operator import attrgetter

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.error_cases import NORM_ERRORS
from conformance.tolerances import tolerance
from reference import norms as oracle

finite = st.floats(-1e3, 1e3, allow_nan=False)
EPS = st.sampled_from([1e-6, 1e-5, 1e-2, 0.5])


@st.composite
def rows_and_weight(draw):
    d = draw(st.integers(1, 12))
    rows = draw(st.lists(st.lists(finite, min_size=d, max_size=d), min_size=1, max_size=4))
    return rows, draw(st.lists(finite, min_size=d, max_size=d))


def norm_rows(rows, weight, eps, *, gemma=False):
    """The spec's formula, row by row: v_i / sqrt(sum(v^2) / d + eps) * w_i (or * (1 + w_i))."""
    out = []
    for row in rows:
        scale = 1.0 / math.sqrt(math.fsum(v * v for v in row) / len(row) + eps)
        out.append([v * scale * ((1.0 + w) if gemma else w) for v, w in zip(row, weight, strict=True)])
    return torch.tensor(out, dtype=torch.float64)


@given(data=rows_and_weight(), eps=EPS, gemma=st.booleans())
def test_norms_match_row_loops(data, eps, gemma):
    """rms_norm / gemma_rms_norm equal the formula written out per row with math.fsum."""
    rows, weight = data
    x, w = torch.tensor(rows, dtype=torch.float64), torch.tensor(weight, dtype=torch.float64)
    op = oracle.gemma_rms_norm if gemma else oracle.rms_norm
    torch.testing.assert_close(
        op(x, w, eps=eps), norm_rows(rows, weight, eps, gemma=gemma), rtol=1e-12, atol=1e-12
    )


@given(data=rows_and_weight(), residual_seed=st.integers(0, 1000), eps=EPS, gemma=st.booleans())
def test_fused_add_is_add_then_norm(data, residual_seed, eps, gemma):
    """The fused ops return (norm(x + residual), x + residual), the sum computed element by element."""
    rows, weight = data
    x, w = torch.tensor(rows, dtype=torch.float64), torch.tensor(weight, dtype=torch.float64)
    residual = torch.randn(
        x.shape, generator=torch.Generator().manual_seed(residual_seed), dtype=torch.float64
    )
    op = oracle.gemma_fused_add_rms_norm if gemma else oracle.fused_add_rms_norm
    normed, new_residual = op(x, residual, w, eps=eps)
    total = [[a + b for a, b in zip(r, s, strict=True)] for r, s in zip(rows, residual.tolist(), strict=True)]
    torch.testing.assert_close(new_residual, torch.tensor(total, dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(normed, norm_rows(total, weight, eps, gemma=gemma), rtol=1e-12, atol=1e-12)


def _peer(module_path: str, name: str):
    transformers = pytest.importorskip("transformers", reason="transformers (peers extra) is not installed")
    del transformers
    import importlib

    try:
        return getattr(importlib.import_module(module_path), name)
    except (ImportError, AttributeError) as error:
        pytest.skip(f"{module_path}.{name} is not importable: {error}")


PEERS = [
    ("transformers.models.llama.modeling_llama", "LlamaRMSNorm", "rms_norm"),
    ("transformers.models.gemma.modeling_gemma", "GemmaRMSNorm", "gemma_rms_norm"),
    ("transformers.models.gemma2.modeling_gemma2", "Gemma2RMSNorm", "gemma_rms_norm"),
]


def _module(cls, d, eps, weight):
    module = cls(d, eps=eps)
    with torch.no_grad():
        module.weight.copy_(weight)
    return module


@pytest.mark.parametrize("module_path, name, op", PEERS, ids=[p[1] for p in PEERS])
@pytest.mark.parametrize("eps", [1e-6, 1e-5])
def test_oracle_matches_transformers_in_float64(module_path, name, op, eps):
    """In float64 the transformers module (weight in float64) and the oracle agree to 1e-12.

    The modules compute in float32 internally (``.to(torch.float32)``), so the float64 check
    uses inputs exactly representable in float32 and a float32-level tolerance."""
    cls = _peer(module_path, name)
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 7, 96, generator=gen) * 3).double()
    weight = torch.randn(96, generator=gen).double()
    got = _module(cls, 96, eps, weight).double()(x)
    torch.testing.assert_close(getattr(oracle, op)(x, weight, eps=eps), got.double(), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("module_path, name, op", PEERS, ids=[p[1] for p in PEERS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_transformers_modules_conform_in_low_precision(module_path, name, op, dtype):
    """The peers themselves, with weights in the input dtype, are within the norms rows of TOL-TABLE
    and keep the input dtype (NORM-DTYPE): the table is not tighter than the reference model code."""
    cls = _peer(module_path, name)
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(8, 512, generator=gen) * 2).to(dtype)
    weight = (torch.randn(512, generator=gen) * 0.5).to(dtype)
    got = _module(cls, 512, 1e-6, weight).to(dtype)(x)
    assert got.dtype == dtype
    tol = tolerance("norms", dtype)
    torch.testing.assert_close(
        got.double(), getattr(oracle, op)(x, weight, eps=1e-6), rtol=tol.rtol, atol=tol.atol
    )


def test_oracles_return_float64_on_input_device():
    x, w, r = torch.randn(3, 8, dtype=torch.bfloat16), torch.randn(8), torch.randn(3, 8, dtype=torch.bfloat16)
    for out in (
        oracle.rms_norm(x, w, eps=1e-6),
        oracle.gemma_rms_norm(x, w, eps=1e-6),
        *oracle.fused_add_rms_norm(x, r, w, eps=1e-6),
        *oracle.gemma_fused_add_rms_norm(x, r, w, eps=1e-6),
    ):
        assert out.dtype == torch.float64 and out.shape == (3, 8) and out.device == x.device


def test_eps_inside_versus_outside_the_root():
    """NORM-EPS's measured fact: at mean square = eps = 1e-6 the two placements differ by 1.41x."""
    m = eps = 1e-6
    assert abs((1 / (math.sqrt(m) + eps)) / (1 / math.sqrt(m + eps)) - 1.41) < 0.01


def test_eps_is_required():
    """NORM-RMS: eps has no default."""
    with pytest.raises(TypeError):
        oracle.rms_norm(torch.ones(4), torch.ones(4))  # type: ignore[call-arg]


@pytest.mark.parametrize("case", NORM_ERRORS, ids=attrgetter("id"))
def test_oracle_raises_the_shared_error_cases(case):
    """NORM-ERRORS: every shared bad-input record raises its exception, naming the argument."""
    with pytest.raises(case.exception, match=case.match):
        case.call(oracle)

"""The norm oracles against independent formulations: per-row loops with math.fsum, and
transformers' LlamaRMSNorm / GemmaRMSNorm / Gemma2RMSNorm modules as peers; the upstream
formulas (transformers' modules, vLLM's and sglang's forward_native) as backends pass the
NORM-MIXED and NORM-LAYOUT properties on the suite's draws."""

from __future__ import annotations

import math
from operator import attrgetter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.bad_input.norms import ERRORS
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


# No deadline: a self-test's verdict must not depend on the machine's speed (a loaded 2-core machine
# took over Hypothesis's default 200 ms for one example).
@settings(deadline=None)
@given(data=rows_and_weight(), eps=EPS, gemma=st.booleans())
def test_norms_match_row_loops(data, eps, gemma):
    """rms_norm / gemma_rms_norm equal the formula written out per row with math.fsum."""
    rows, weight = data
    x, w = torch.tensor(rows, dtype=torch.float64), torch.tensor(weight, dtype=torch.float64)
    op = oracle.gemma_rms_norm if gemma else oracle.rms_norm
    torch.testing.assert_close(
        op(x, w, eps=eps), norm_rows(rows, weight, eps, gemma=gemma), rtol=1e-12, atol=1e-12
    )


@settings(deadline=None)
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


@pytest.mark.parametrize("case", ERRORS, ids=attrgetter("id"))
def test_oracle_raises_the_shared_error_cases(case):
    """NORM-ERRORS: every shared bad-input record raises its exception, naming the argument."""
    with pytest.raises(case.exception, match=case.match):
        case.call(oracle)


@pytest.mark.parametrize("module_path, name, op", PEERS + [
    ("transformers.models.gemma3.modeling_gemma3", "Gemma3RMSNorm", "gemma_rms_norm")],
    ids=[p[1] for p in PEERS] + ["Gemma3RMSNorm"])  # fmt: skip
def test_mixed_output_dtypes_are_transformers(module_path, name, op):
    """NORM-MIXED's facts: with a bfloat16 x and a float32 weight, LlamaRMSNorm returns float32
    (the promotion) and the Gemma modules bfloat16; each is what normed_dtypes allows, and
    normed_dtypes allows nothing else for Gemma."""
    module = _peer(module_path, name)(16, eps=1e-6)
    x = torch.randn(3, 16).to(torch.bfloat16)
    got = module(x).dtype
    assert got == (torch.float32 if name == "LlamaRMSNorm" else torch.bfloat16)
    allowed = oracle.normed_dtypes(op, x, module.weight)
    assert got in allowed and (op == "rms_norm" or allowed == (torch.bfloat16,))


def test_output_dtype_rules():
    """NORM-MIXED's tables, and one clear line naming the bad argument."""
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    assert oracle.residual_dtypes(bf16, f32) == (bf16, f32)
    assert oracle.residual_dtypes(f32, bf16) == (f32,)
    assert oracle.residual_dtypes(f16, bf16) == (f16, f32)
    assert oracle.normed_dtypes("rms_norm", bf16, f32) == (bf16, f32)
    assert oracle.normed_dtypes("gemma_rms_norm", bf16, f32) == (bf16,)
    assert oracle.normed_dtypes("gemma_fused_add_rms_norm", bf16, f32, f32) == (bf16, f32)
    assert oracle.normed_dtypes("fused_add_rms_norm", bf16, f32, bf16) == (bf16, f32)
    assert oracle.normed_rounding_dtype("rms_norm", f32, bf16) == bf16  # vLLM 0.33: x.to(weight.dtype)
    assert oracle.normed_rounding_dtype("fused_add_rms_norm", f16, bf16) == bf16
    assert oracle.normed_rounding_dtype("rms_norm", bf16, f32) == bf16
    assert oracle.normed_rounding_dtype("gemma_rms_norm", f32, bf16) == f32  # 1 + weight in float32
    with pytest.raises(ValueError, match="op must be one of"):
        oracle.normed_dtypes("layer_norm", bf16, f32)
    with pytest.raises(ValueError, match="residual must be given"):
        oracle.normed_dtypes("fused_add_rms_norm", bf16, f32)
    with pytest.raises(TypeError, match="weight must be a floating dtype"):
        oracle.normed_dtypes("rms_norm", bf16, torch.int32)
    with pytest.raises(TypeError, match="residual must be a floating dtype"):
        oracle.residual_dtypes(bf16, "float32")


# --- the field's formulas as backends (spec/norms.md, NORM-MIXED and NORM-LAYOUT, Sources) ------


class _Peer:
    def unavailable(self, device):
        return None

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        total = x + residual  # a transformers decoder layer: the sum in PyTorch's promotion
        return self.rms_norm(total, weight, eps=eps), total

    def gemma_fused_add_rms_norm(self, x, residual, weight, *, eps):
        total = x + residual
        return self.gemma_rms_norm(total, weight, eps=eps), total


class TransformersPeer(_Peer):
    """transformers' LlamaRMSNorm and Gemma3RMSNorm modules, the weight kept in its own dtype."""

    name = "transformers-norm-modules"

    def _run(self, module_path, name, x, weight, eps):
        module = _peer(module_path, name)(weight.shape[0], eps=eps)
        module.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)
        return module(x)

    def rms_norm(self, x, weight, *, eps):
        return self._run("transformers.models.llama.modeling_llama", "LlamaRMSNorm", x, weight, eps)

    def gemma_rms_norm(self, x, weight, *, eps):
        return self._run("transformers.models.gemma3.modeling_gemma3", "Gemma3RMSNorm", x, weight, eps)


class VllmNativePeer(_Peer):
    """vLLM's RMSNorm.forward_native and GemmaRMSNorm.forward_static at commit 00cba797, as spec/norms.md
    quotes them (its Gemma residual is float32 for float16 inputs, a deviation: the fused Gemma op is
    left out); vLLM 0.33's forms: tests/test_upstream_conventions.py."""

    name = "vllm-forward-native"

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        orig_dtype = x.dtype
        x = x.to(torch.float32) + residual.to(torch.float32)
        residual = x.to(orig_dtype)
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        return x.to(orig_dtype) * weight, residual

    def rms_norm(self, x, weight, *, eps):
        orig_dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        return x.to(orig_dtype) * weight

    def gemma_rms_norm(self, x, weight, *, eps):
        orig_dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        return (x * (1.0 + weight.float())).to(orig_dtype)


class SglangNativePeer(_Peer):
    """sglang's RMSNorm.forward_native (the weight product in float32, cast once) and
    GemmaRMSNorm.forward_native (the sum in PyTorch's promotion), as spec/norms.md quotes them."""

    name = "sglang-forward-native"

    def _rms(self, x, weight, eps, residual=None):
        x = x.contiguous()
        orig_dtype = x.dtype
        x = x.to(torch.float32)
        if residual is not None:
            x = x + residual.to(torch.float32)
            residual = x.to(orig_dtype)
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        x = (x * weight).to(orig_dtype)
        return x if residual is None else (x, residual)

    def rms_norm(self, x, weight, *, eps):
        return self._rms(x, weight, eps)

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        return self._rms(x, weight, eps, residual)

    def gemma_rms_norm(self, x, weight, *, eps):
        orig_dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        return (x * (1.0 + weight.float())).to(orig_dtype)


UPSTREAM = [
    (peer, op)
    for peer in (TransformersPeer(), VllmNativePeer(), SglangNativePeer())
    for op in oracle.NORM_OPS
    if not (peer.name == "vllm-forward-native" and op == "gemma_fused_add_rms_norm")
]
# The properties' own bodies on their own draws, with fewer examples (11 peer/op pairs each).
# Imported when a test runs, not at collection: importing conformance.test_norms outside the
# suite's collection would bind its @given tests to the profile loaded here (profiles.SuiteProfile).
PEER_CLAUSES = {
    "NORM-MIXED": ("test_mixed_dtypes", "MIXED_RECIPES"),
    "NORM-LAYOUT": ("test_row_strided_x_gives_the_oracle", "ROW_STRIDED_RECIPES"),
    "NORM-VIEWS": ("test_should_accept_views", "VIEW_RECIPES"),
}


@pytest.mark.parametrize("clause", list(PEER_CLAUSES))
@pytest.mark.parametrize("peer, op", UPSTREAM, ids=[f"{p.name}-{op}" for p, op in UPSTREAM])
def test_upstream_formulas_pass_mixed_dtypes_and_views(clause, peer, op):
    """The field's correct norms (transformers' modules with a float32 weight give float32,
    sglang's give x's dtype; the residual in x's dtype or the promoted one) pass NORM-MIXED and
    NORM-LAYOUT (and NORM-VIEWS) on the suite's draws: the clauses demand no more than the field does."""
    if isinstance(peer, TransformersPeer):
        _peer("transformers.models.llama.modeling_llama", "LlamaRMSNorm")
    from conformance import test_norms as properties

    prop, recipes = (getattr(properties, name) for name in PEER_CLAUSES[clause])

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(recipe=recipes)
    def run(recipe):
        prop.hypothesis.inner_test(backend=peer, device=torch.device("cpu"), op=op, recipe=recipe)

    run()

"""Conformance properties for spec/rope.md's tensor ops (rope_cos_sin, rotary_embedding, mrope,
rope_kernel_args) and ROPE-ERRORS. Every comparison is ROPE-TOL's: the ``rope`` rows with atol scaled
by ``pair_scale``, the ``rope-cos-sin`` rows scaled by ``angle_scale``."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.rope import ERRORS
from conformance.checks import assert_close, check, describe
from conformance.harness import profiles
from conformance.strategies.model_pins import cos_sin_rows
from conformance.strategies.rope import rope_recipes
from conformance.tolerances import angle_scale, pair_scale, tolerance
from reference import rope as oracle

FAMILY = "rope"
FEW = profiles.share_of_examples(1 / 3)  # a third of the profile's examples: the definitions
# The refinements, each pinning one mechanism on draws narrowed to it: a sixth (at least 5).
FEWER = profiles.share_of_examples(1 / 6)
STYLES = pytest.mark.parametrize("is_neox_style", [True, False], ids=["neox", "gptj"])


def _compare(
    backend, device, recipe, is_neox_style, clause, *, which=("query", "key"), op="rotary_embedding"
):
    positions, q, k, cache = recipe.make(device)
    kwargs = {"is_neox_style": is_neox_style}
    if op == "mrope":  # the drawn sections, or a model's (spec/models.md, MODEL-RUN)
        kwargs.update(mrope_section=list(recipe.mrope_section), mrope_interleaved=recipe.mrope_interleaved)
    # The oracle first, on copies (as vLLM's kernel tests do): an in-place kernel that writes its
    # inputs is ROPE-PURE's failure, not a wrong value here.
    originals = [t.cpu().clone() for t in (positions, q, k, cache)]
    want = getattr(oracle, op)(*originals, **kwargs)
    got = getattr(backend, op)(positions, q, k, cache, **kwargs)
    context = f"{describe(backend, device, op, **kwargs)}: {recipe.describe()}"
    check(
        isinstance(got, tuple | list) and len(got) == 2,
        clause=clause,
        message=f"{context}: returned {type(got).__name__}, expected the pair (query, key)",
    )
    rows = _rows(originals[3], originals[0], recipe, kwargs)
    q, k = originals[1].to(device), originals[2].to(device)
    for name, a, e, x in zip(("query", "key"), got, want, (q, k), strict=True):
        if name not in which:
            continue
        check(
            a.dtype == x.dtype and a.shape == x.shape and a.device == x.device,
            clause=clause,
            message=f"{context}: {name} is {a.dtype} {tuple(a.shape)} on {a.device}, expected "
            f"{x.dtype} {tuple(x.shape)} on {x.device}",
        )
        scale = pair_scale(x.cpu(), rows, is_neox_style)
        assert_close(
            a,
            e,
            clause=clause,
            family=FAMILY,
            context=f"{context}: {name}",
            dtype=x.dtype,
            atol_scale=scale,
            device=device,
        )
    return positions, q, k, cache, got


def _rows(cache, positions, recipe, kwargs):
    """Each token's cache row (for the tolerance's magnitude): mrope takes the largest of its rows."""
    rows = cache.double()[positions.long()]
    return rows.abs().amax(0) if recipe.mrope else rows


@pytest.mark.clause("ROPE-APPLY")
@pytest.mark.op("rotary_embedding")
@STYLES
@FEW
@given(recipe=rope_recipes())
def test_rotary_embedding_matches_oracle(backend, device, is_neox_style, recipe):
    """Both outputs equal the oracle's rotation of every pair at each token's position."""
    _compare(backend, device, recipe, is_neox_style, "ROPE-APPLY")


@pytest.mark.clause("ROPE-STYLE")
@pytest.mark.op("rotary_embedding")
@STYLES
@FEWER
@given(recipe=rope_recipes(partial=False, dtypes=(torch.float32,), cache_dtypes=(torch.float32,)))
def test_pairing_follows_the_style(backend, device, is_neox_style, recipe):
    """NeoX pairs (i, i + r/2), GPT-J (2i, 2i + 1): fully rotated float32 heads, the pairing the only
    variable."""
    _compare(backend, device, recipe, is_neox_style, "ROPE-STYLE", which=("query",))


@pytest.mark.clause("ROPE-PARTIAL")
@pytest.mark.op("rotary_embedding")
@STYLES
@FEWER
@given(recipe=rope_recipes(partial=True, dtypes=(torch.float32, torch.bfloat16)))
def test_partial_rotation_passes_the_rest_through(backend, device, is_neox_style, recipe):
    """With rotary_dim < head_dim the first rotary_dim dims rotate and the rest come back bit for bit."""
    positions, q, k, cache, got = _compare(backend, device, recipe, is_neox_style, "ROPE-PARTIAL")
    r = recipe.rotary_dim
    for name, a, x in zip(("query", "key"), got, (q, k), strict=True):
        check(
            torch.equal(a[..., r:], x[..., r:]),
            clause="ROPE-PARTIAL",
            message=f"{describe(backend, device, 'rotary_embedding')}: {recipe.describe()}: {name}[..., "
            f"{r}:] changed (the pass-through dims)",
        )


@pytest.mark.clause("ROPE-POSITIONS")
@pytest.mark.op("rotary_embedding")
@FEWER
@given(recipe=rope_recipes(dtypes=(torch.float32,)), is_neox_style=st.booleans())
def test_positions_are_read_not_assumed(backend, device, recipe, is_neox_style):
    """Offsets, packed restarts and any order: token t uses row positions[t], never arange."""
    _compare(backend, device, recipe, is_neox_style, "ROPE-POSITIONS", which=("query",))


@pytest.mark.clause("ROPE-QK")
@pytest.mark.op("rotary_embedding")
@FEWER
@given(recipe=rope_recipes(dtypes=(torch.float32,)), is_neox_style=st.booleans())
def test_key_is_rotated_too(backend, device, recipe, is_neox_style):
    """The key (its own head count) is rotated at the query's positions."""
    _compare(backend, device, recipe, is_neox_style, "ROPE-QK", which=("key",))


@pytest.mark.clause("ROPE-DTYPE")
@pytest.mark.op("rotary_embedding")
@FEWER
@given(
    recipe=rope_recipes(dtypes=(torch.float32, torch.float64), cache_dtypes=(torch.float32, torch.float64)),
    is_neox_style=st.booleans(),
)
def test_output_dtype_and_wide_compute(backend, device, recipe, is_neox_style):
    """float32/float64 inputs keep their dtype and their precision (no bfloat16 cache or compute)."""
    _compare(backend, device, recipe, is_neox_style, "ROPE-DTYPE")


@pytest.mark.clause("ROPE-PURE")
@pytest.mark.op("rotary_embedding")
@FEWER
@given(recipe=rope_recipes(qkv_split=True), is_neox_style=st.booleans())
def test_inputs_are_left_unchanged(backend, device, recipe, is_neox_style):
    """Contiguous inputs (which an in-place kernel's ``.contiguous()`` does not copy) and q, k as
    views of one qkv projection give the oracle's values and are not written to."""
    _check_pure(backend, device, (dataclasses.replace(recipe, qkv_split=False), recipe), is_neox_style)


@pytest.mark.clause("ROPE-VIEWS")
@pytest.mark.op("rotary_embedding")
@profiles.should_examples(1 / 6)
@given(recipe=rope_recipes(strided=True), is_neox_style=st.booleans())
def test_should_accept_views(backend, device, recipe, is_neox_style):
    """positions, q, k and the cache as every other element of a buffer: the oracle's values, and
    nothing written to."""
    _check_pure(backend, device, (recipe,), is_neox_style, clause="ROPE-VIEWS")


@pytest.mark.clause("ROPE-VIEWS")
@pytest.mark.op("mrope")
@profiles.should_examples(1 / 6)
@given(is_neox_style=st.booleans(), recipe=rope_recipes(mrope=True, strided=True))
def test_should_accept_mrope_views(backend, device, is_neox_style, recipe):
    """mrope's [3, T] positions, q, k and the cache as every other element of a buffer: the oracle's."""
    _compare(backend, device, recipe, is_neox_style, "ROPE-VIEWS", op="mrope")


def _check_pure(backend, device, cases, is_neox_style, *, clause="ROPE-PURE") -> None:
    for case in cases:
        positions, q, k, cache = case.make(device)
        before = [t.clone() for t in (positions, q, k, cache)]
        backend.rotary_embedding(positions, q, k, cache, is_neox_style=is_neox_style)
        check(
            all(torch.equal(t, b) for t, b in zip((positions, q, k, cache), before, strict=True)),
            clause=clause,
            message=f"{describe(backend, device, 'rotary_embedding')}: {case.describe()}: "
            "an input was modified in place",
        )
        _compare(backend, device, case, is_neox_style, clause)


@pytest.mark.clause("ROPE-RELATIVE")
@pytest.mark.op("rotary_embedding")
@FEWER
@given(
    recipe=rope_recipes(dtypes=(torch.float32,), cache_dtypes=(torch.float32,), partial=False),
    shift=st.integers(1, 300),
    is_neox_style=st.booleans(),
)
def test_scores_depend_on_position_differences(backend, device, recipe, shift, is_neox_style):
    """q'.k' per token and head is unchanged when every position moves by ``shift``; norms are kept."""
    positions, q, k, cache = recipe.make(device)
    longer = oracle.rope_cos_sin(torch.arange(cache.shape[0] + shift), _inv(recipe), attention_factor=1.0)
    longer = longer.to(cache.dtype).to(device)
    k1 = k[:, :1].expand(-1, q.shape[1], -1).contiguous()
    base = backend.rotary_embedding(positions, q, k1, longer, is_neox_style=is_neox_style)
    moved = backend.rotary_embedding(positions + shift, q, k1, longer, is_neox_style=is_neox_style)
    context = f"{describe(backend, device, 'rotary_embedding')}: {recipe.describe()}, shift {shift}"
    dots = [(a.double() * b.double()).sum(-1) for a, b in (base, moved)]
    # One side's allowance (ROPE-TOL's float32 row over the dot product); a metamorphic comparison
    # allows both sides' (assert_close, TOL-TABLE).
    bound = (q.double().abs() * k1.double().abs()).sum(-1) * 4e-6
    tol = tolerance(FAMILY, torch.float32)
    assert_close(
        dots[1],
        dots[0],
        clause="ROPE-RELATIVE",
        tol=tol,
        context=f"{context}: q'.k'",
        atol_scale=bound / tol.atol,
        expected_as="backend's own unshifted result",
    )
    norms = moved[0].double().norm(dim=-1)
    assert_close(
        norms,
        q.double().norm(dim=-1),
        clause="ROPE-RELATIVE",
        tol=tol,
        context=f"{context}: |q'| against |q|",
        atol_scale=4 * norms.abs(),
    )


def _inv(recipe):
    if recipe.inv_freq is not None:  # a model's frequencies (MODEL-RUN)
        return torch.tensor(recipe.inv_freq, dtype=torch.float64).float()
    r = recipe.rotary_dim
    return (1.0 / (10000 ** (torch.arange(0, r, 2, dtype=torch.float64) / r))).float()


@pytest.mark.clause("ROPE-MROPE")
@pytest.mark.op("mrope")
@STYLES
@FEW
@given(recipe=rope_recipes(mrope=True))
def test_mrope_sections(backend, device, is_neox_style, recipe):
    """Each frequency takes its angle from its section's row of the 3-row positions (Qwen2-VL
    sections or Qwen3-VL interleaved; equal and unequal sections, Qwen3-VL's [24, 20, 20])."""
    _compare(backend, device, recipe, is_neox_style, "ROPE-MROPE", op="mrope")


@pytest.mark.clause("ROPE-COS-SIN")
@pytest.mark.op("rope_cos_sin")
@FEW
@given(
    rotary_dim=st.sampled_from((2, 8, 64, 96, 128, 256)),
    positions=st.lists(st.integers(0, 4095), min_size=1, max_size=16),
    dtype=st.sampled_from((torch.float32, torch.float64)),
    attention_factor=st.sampled_from((1.0, 1.35, 0.8)),
    positions_dtype=st.sampled_from((torch.int64, torch.int32)),
    model=cos_sin_rows(),
)
def test_cos_sin_rows(
    backend, device, rotary_dim, positions, dtype, attention_factor, positions_dtype, model
):
    """Row p is cat(cos, sin)(p f) * attention_factor, in inv_freq's dtype."""
    args = (rotary_dim, positions, dtype, attention_factor, positions_dtype)
    _check_cos_sin(backend, device, *args, False, "ROPE-COS-SIN", model=model)


@pytest.mark.clause("ROPE-VIEWS")
@pytest.mark.op("rope_cos_sin")
@profiles.should_examples(1 / 6)
@given(
    rotary_dim=st.sampled_from((2, 8, 64)),
    positions=st.lists(st.one_of(st.integers(0, 63), st.integers(100000, 262143)), min_size=1, max_size=8),
    model=cos_sin_rows(max_size=8),
)
def test_should_accept_cos_sin_views(backend, device, rotary_dim, positions, model):
    """positions and inv_freq as every other element of a buffer: the rows of their copies."""
    args = (rotary_dim, positions, torch.float32, 1.0, torch.int64)
    _check_cos_sin(backend, device, *args, True, "ROPE-VIEWS", model=model)


@pytest.mark.clause("ROPE-LONG")
@pytest.mark.op("rope_cos_sin")
@FEWER
@given(
    positions=st.lists(st.one_of(st.integers(0, 63), st.integers(100000, 262143)), min_size=1, max_size=8),
    rotary_dim=st.sampled_from((16, 96, 128, 256)),
    model=cos_sin_rows(max_size=8),
)
def test_long_positions_keep_float32_angles(backend, device, positions, rotary_dim, model):
    """Positions past 100k (and below 64, where a bfloat16 cos shows) within the float32 allowance."""
    args = (rotary_dim, positions, torch.float32, 1.0, torch.int64)
    _check_cos_sin(backend, device, *args, False, "ROPE-LONG", model=model)


def _check_cos_sin(
    backend,
    device,
    rotary_dim,
    positions,
    dtype,
    attention_factor,
    positions_dtype,
    strided,
    clause,
    *,
    model=None,
):
    """``model`` (a profile run's ModelRows): its frequencies, attention factor and positions instead."""
    if model is not None:
        rotary_dim, positions, attention_factor = (
            model.rotary_dim,
            list(model.positions),
            model.attention_factor,
        )
        inv = torch.tensor(model.inv_freq, dtype=torch.float64).to(dtype)
    else:
        inv = (1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))).to(dtype)
    p = torch.tensor(positions, dtype=positions_dtype)
    p, inv = p.to(device), inv.to(device)
    if strided:
        p, inv = torch.stack([p, p], -1)[..., 0], torch.stack([inv, inv], -1)[..., 0]
    got = backend.rope_cos_sin(p, inv, attention_factor=attention_factor)
    want = oracle.rope_cos_sin(p.cpu(), inv.cpu(), attention_factor=attention_factor)
    context = (
        f"{describe(backend, device, 'rope_cos_sin', attention_factor=attention_factor)}: rotary_dim "
        f"{rotary_dim}, inv_freq {dtype}{' (the model rope)' if model else ''}, positions up to "
        f"{max(positions)}"
    )
    check(
        got.dtype == dtype and got.shape == want.shape,
        clause=clause,
        message=f"{context}: got {got.dtype} {tuple(got.shape)}, expected {dtype} {tuple(want.shape)}",
    )
    scale = angle_scale(p.cpu(), inv.cpu(), attention_factor)
    assert_close(
        got, want, clause=clause, family="rope-cos-sin", context=context, atol_scale=scale, device=device
    )


@pytest.mark.clause("ROPE-KERNEL-ARGS")
@pytest.mark.op("rope_kernel_args")
@STYLES
def test_kernel_args_select_the_style(backend, device, is_neox_style):
    """Every rope kernel the backend calls receives its API's spelling of the requested pairing."""
    args = backend.rope_kernel_args(is_neox_style)
    context = describe(backend, device, "rope_kernel_args", is_neox_style=is_neox_style)
    check(isinstance(args, dict) and args, clause="ROPE-KERNEL-ARGS", message=f"{context}: returned {args!r}")
    unknown = [api for api in args if not oracle.known_kernel_api(api)]
    for api in (api for api in args if api not in unknown):
        values = args[api]
        try:
            style = oracle.kernel_style(api, values)
        except ValueError as error:
            check(False, clause="ROPE-KERNEL-ARGS", message=f"{context}: {error}")
        check(
            style is is_neox_style,
            clause="ROPE-KERNEL-ARGS",
            message=f"{context}: {api} gets {values!r}, which selects {'NeoX' if style else 'GPT-J'}",
        )
    if unknown:  # an API the table does not know: its spelling is not judged, never failed
        judged = sorted(set(args) - set(unknown))
        others = f"the others conform: {', '.join(judged)}" if judged else "nothing else was returned"
        known = sorted(oracle.KERNEL_FLAGS)
        pytest.skip(f"not judged: ROPE-KERNEL-ARGS' table has no API {unknown} (it knows {known}); {others}")


@pytest.mark.clause("ROPE-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad input raises the documented exception type, with a message naming the argument."""
    check_backend_raises(case, backend, device)

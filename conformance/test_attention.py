"""Conformance properties for spec/attention.md (ATTN, ATTN-PREFILL, ATTN-DECODE) and PREFILL-DECODE."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import backends
from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.attention import ERRORS
from conformance.checks import assert_close, check_output, check_raises, describe
from conformance.harness import profiles
from conformance.strategies.attention import (
    METADATA_VIEWS,
    attention_recipes,
    decode_lengths,
    softmax_scales,
    windows_inside,
)
from conformance.strategies.common import strided_view
from conformance.strategies.masks import PADDING_PATTERNS, make_padding_mask, windows
from conformance.strategies.nan import excused_rows, nan_sites, put_nan
from conformance.tolerances import value_scale
from reference import attention as oracle
from reference.masks import additive_mask

FAMILY = "attention"
# ATTN-NAN/SERVE-NAN: a third of the profile's examples (profiles.share_of_examples).
NAN_EXAMPLES = profiles.share_of_examples(1 / 3)
# A third of the examples where the clause's bug shows on most draws (paying for the ranges' regions):
# an ignored scale fails 2 draws in 3 (not 1/sqrt(D)), a window one key off every draw of W < S.
MOST_DRAWS = profiles.share_of_examples(1 / 3)


def compare(out, want, v, *, clause, context, rows=None, valid_keys=None, expected_as="expected"):
    """assert_close on the rows the clause compares (``rows``: bool [B, Sq]), q's dtype and device first."""
    check_output(out, want, clause=clause, context=context, dtype=v.dtype, device=v.device)
    if rows is not None:
        keep = rows.cpu()[:, None, :, None]
        out, want = torch.where(keep, out.detach().cpu(), 0), torch.where(keep, want, 0)
    assert_close(
        out,
        want,
        clause=clause,
        family=FAMILY,
        atol_scale=value_scale(v, want.shape[1], valid_keys),
        context=context,
        expected_as=expected_as,
    )


def random_allowed(batch, q_len, kv_len, seed, device, *, strided=False):
    """[B, 1, Sq, Sk] bool with about 60% allowed; row 0 of batch 0 is empty when seed is even;
    ``strided``: a view (metadata may have any strides, as q, k, v may)."""
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.rand(batch, 1, q_len, kv_len, generator=gen) < 0.6
    if seed % 2 == 0:
        allowed[0, 0, 0] = False
    return strided_view(allowed.to(device)) if strided else allowed.to(device)


def lengths_argument(seq_lens, recipe, device):
    """decode's seq_lens on ``device``, a strided view in the recipe's "views" examples."""
    on_device = seq_lens.to(device)
    return strided_view(on_device) if recipe.layout == METADATA_VIEWS else on_device


@pytest.mark.clause("ATTN")
@pytest.mark.op("attention")
@given(recipe=attention_recipes(same_len=False, max_len=64))
def test_attention_matches_oracle(backend, device, recipe):
    """attention with an arbitrary bool mask matches ATTN; rows with no allowed key are zeros."""
    _check_attention(backend, device, recipe, clause="ATTN")


def _check_attention(backend, device, recipe, *, clause: str) -> None:
    q, k, v = recipe.make(device)
    strided = recipe.layout == METADATA_VIEWS
    allowed = random_allowed(recipe.batch, recipe.q_len, recipe.kv_len, recipe.seed, device, strided=strided)
    scale = recipe.attention_scale
    out = backend.attention(q, k, v, allowed=allowed, scale=scale)
    want = oracle.attention(q.cpu(), k.cpu(), v.cpu(), allowed=allowed.cpu(), scale=scale)
    compare(out, want, v, clause=clause, context=describe(backend, device, "attention", recipe=recipe))


SHOULD_VIEWS = {"layouts": (METADATA_VIEWS,), "max_len": 48}


@pytest.mark.clause("ATTN-METADATA-VIEWS")
@pytest.mark.op("attention")
@profiles.should_examples()
@given(recipe=attention_recipes(same_len=False, **SHOULD_VIEWS))
def test_should_read_a_strided_mask(backend, device, recipe):
    """A bool mask given as every other element of a buffer is read through its strides."""
    _check_attention(backend, device, recipe, clause="ATTN-METADATA-VIEWS")


def padding_argument(padding_mask, device, data, recipe):
    """The padding mask as prefill_attention gets it: bool, or drawn as 0/1 int64 (MASK-ENC: the
    tokenizer's attention_mask means the same); a strided view in the recipe's "views" examples."""
    if padding_mask is None:
        return None
    on_device = padding_mask.to(device)
    on_device = on_device.long() if data.draw(st.booleans(), label="int64 padding mask") else on_device
    return strided_view(on_device) if recipe.layout == METADATA_VIEWS else on_device


@pytest.mark.clause("ATTN-PREFILL")
@pytest.mark.op("prefill_attention")
@given(data=st.data(), recipe=attention_recipes(), padding=st.sampled_from(PADDING_PATTERNS))
def test_prefill_matches_oracle(backend, device, data, recipe, padding):
    """prefill_attention matches ATTN with MASK-ENC on every real (unpadded) query row."""
    _check_prefill(backend, device, data, recipe, padding, clause="ATTN-PREFILL")


@pytest.mark.clause("ATTN-METADATA-VIEWS")
@pytest.mark.op("prefill_attention")
@profiles.should_examples()
@given(data=st.data(), recipe=attention_recipes(**SHOULD_VIEWS), padding=st.sampled_from(PADDING_PATTERNS))
def test_should_read_a_strided_padding_mask(backend, device, data, recipe, padding):
    """A padding mask given as every other element of a buffer is read through its strides."""
    _check_prefill(backend, device, data, recipe, padding, clause="ATTN-METADATA-VIEWS")


def _check_prefill(backend, device, data, recipe, padding, *, clause: str) -> None:
    sliding_window = data.draw(windows(recipe.kv_len), label="sliding_window")
    padding_mask = make_padding_mask(padding, recipe.batch, recipe.kv_len, recipe.seed)
    q, k, v = recipe.make(device)
    scale = recipe.attention_scale
    on_device = padding_argument(padding_mask, device, data, recipe)
    out = backend.prefill_attention(
        q, k, v, sliding_window=sliding_window, padding_mask=on_device, scale=scale
    )
    want = oracle.prefill_attention(
        q.cpu(), k.cpu(), v.cpu(), sliding_window=sliding_window, padding_mask=padding_mask, scale=scale
    )
    context = describe(
        backend, device, "prefill_attention", recipe=recipe, sliding_window=sliding_window, padding=padding
    )
    compare(out, want, v, clause=clause, context=context, rows=padding_mask, valid_keys=padding_mask)


@pytest.mark.clause("ATTN-PREFILL")
@pytest.mark.op("prefill_attention")
@MOST_DRAWS
@given(data=st.data(), recipe=attention_recipes(dtypes=(torch.float32,), max_len=80))
def test_prefill_window_is_exact_in_float32(backend, device, data, recipe):
    """With W < S in float32, one key more or less than W (|v|/W) is far outside the tolerance."""
    sliding_window = data.draw(windows_inside(recipe), label="sliding_window")
    q, k, v = recipe.make(device)
    scale = recipe.attention_scale
    out = backend.prefill_attention(q, k, v, sliding_window=sliding_window, padding_mask=None, scale=scale)
    want = oracle.prefill_attention(
        q.cpu(), k.cpu(), v.cpu(), sliding_window=sliding_window, padding_mask=None, scale=scale
    )
    context = describe(backend, device, "prefill_attention", recipe=recipe, sliding_window=sliding_window)
    compare(out, want, v, clause="ATTN-PREFILL", context=context)


def poison_stale_rows(cache: torch.Tensor, seq_lens: torch.Tensor, value: float) -> torch.Tensor:
    """Cache rows at or beyond L set to ``value`` (NaN or huge): they are not part of the sequence."""
    stale = torch.arange(cache.shape[2], device=cache.device)[None, :] >= seq_lens.to(cache.device)[:, None]
    return cache.masked_fill(stale[:, None, :, None], value)


@pytest.mark.clause("ATTN-DECODE")
@pytest.mark.op("decode_attention")
@given(
    data=st.data(),
    recipe=attention_recipes(same_len=False, q_len=1, max_len=128),
    poison=st.sampled_from([float("nan"), 1e30]),
)
def test_decode_matches_oracle(backend, device, data, recipe, poison):
    """decode_attention matches row L - 1 of the prefill; stale cache rows (NaN, 1e30) are never read."""
    _check_decode(backend, device, data, recipe, poison, clause="ATTN-DECODE")


@pytest.mark.clause("ATTN-METADATA-VIEWS")
@pytest.mark.op("decode_attention")
@profiles.should_examples()
@given(data=st.data(), recipe=attention_recipes(same_len=False, q_len=1, **SHOULD_VIEWS))
def test_should_read_strided_seq_lens(backend, device, data, recipe):
    """decode's seq_lens given as every other element of a buffer are read through their strides."""
    _check_decode(backend, device, data, recipe, float("nan"), clause="ATTN-METADATA-VIEWS")


def _check_decode(backend, device, data, recipe, poison, *, clause: str) -> None:
    seq_lens = data.draw(decode_lengths(recipe.batch, recipe.kv_len), label="seq_lens")
    sliding_window = data.draw(windows(recipe.kv_len), label="sliding_window")
    q, k, v = recipe.make(device)
    poison = (
        poison
        if recipe.dtype == torch.float32 or math.isnan(poison)
        else 6e4
        if recipe.dtype == torch.float16
        else 1e30
    )
    k_cache, v_cache = recipe.laid_out(*(poison_stale_rows(t, seq_lens, poison) for t in (k, v)))
    scale = recipe.attention_scale
    out = backend.decode_attention(
        q, k_cache, v_cache, lengths_argument(seq_lens, recipe, device), sliding_window=sliding_window,
        scale=scale,
    )  # fmt: skip
    want = oracle.decode_attention(
        q.cpu(), k_cache.cpu(), v_cache.cpu(), seq_lens, sliding_window=sliding_window, scale=scale
    )
    valid_keys = torch.arange(recipe.kv_len)[None, :] < seq_lens[:, None]
    context = describe(
        backend, device, "decode_attention", recipe=recipe, seq_lens=seq_lens.tolist(),
        sliding_window=sliding_window, stale_rows=poison,
    )  # fmt: skip
    compare(out, want, v, clause=clause, context=context, valid_keys=valid_keys)


@pytest.mark.clause("PREFILL-DECODE")
@pytest.mark.op("decode_attention")
@given(data=st.data(), recipe=attention_recipes(dtypes=(torch.float32,), max_len=80))
def test_decode_equals_prefill_row(backend, device, data, recipe):
    """Decoding the token at position p gives row p of the same backend's prefill (same W)."""
    reason = backends.not_implemented_reason(backend, "prefill_attention")
    if reason:
        pytest.skip(reason)
    sliding_window = data.draw(windows(recipe.kv_len), label="sliding_window")
    positions = data.draw(decode_lengths(recipe.batch, recipe.kv_len), label="lengths") - 1
    q, k, v = recipe.make(device)
    scale = recipe.attention_scale
    prefill = backend.prefill_attention(
        q, k, v, sliding_window=sliding_window, padding_mask=None, scale=scale
    )
    batch_index = torch.arange(recipe.batch)
    q_token = q[batch_index, :, positions.to(device)][:, :, None]  # [B, Hq, 1, D]
    decode = backend.decode_attention(
        q_token, k, v, (positions + 1).to(device), sliding_window=sliding_window, scale=scale
    )
    prefill_rows = prefill[batch_index, :, positions.to(device)][:, :, None]
    context = describe(
        backend, device, "decode_attention vs prefill_attention", recipe=recipe,
        positions=positions.tolist(), sliding_window=sliding_window,
    )  # fmt: skip
    compare(decode, prefill_rows.detach().cpu().double(), v, clause="PREFILL-DECODE", context=context,
            expected_as="backend's prefill row")  # fmt: skip


@pytest.mark.clause("ATTN-SCALE")
@pytest.mark.op("prefill_attention")
@MOST_DRAWS
@given(data=st.data(), recipe=attention_recipes(scales=(2.0, 3.0), max_len=48))
def test_scale_is_the_one_passed(backend, device, data, recipe):
    """Large scores at the scale passed (1/sqrt(D), MLA's, YaRN's, any): a backend that uses another
    (the op default 1.0, or 1/sqrt(D) whatever was passed) fails."""
    q, k, v = recipe.make(device)
    # ATTN-TOL's measured range: q, k up to 3 sigma at 1/sqrt(D) (ratio x magnitude^2 <= 9).
    scale = data.draw(softmax_scales(recipe.head_dim, max_ratio=9 / recipe.scale**2), label="scale")
    out = backend.prefill_attention(q, k, v, sliding_window=None, padding_mask=None, scale=scale)
    want = oracle.prefill_attention(
        q.cpu(), k.cpu(), v.cpu(), sliding_window=None, padding_mask=None, scale=scale
    )
    compare(
        out,
        want,
        v,
        clause="ATTN-SCALE",
        context=describe(backend, device, "prefill_attention", recipe=recipe, scale=scale),
    )


@pytest.mark.clause("ATTN-FLOAT-MASK")
@pytest.mark.op("attention")
@given(recipe=attention_recipes(max_len=48))
def test_additive_mask_in_query_dtype_equals_bool(backend, device, recipe):
    """An additive 0/-inf mask in q's dtype gives the bool mask's result, or is rejected with TypeError."""
    q, k, v = recipe.make(device)
    allowed = random_allowed(recipe.batch, recipe.q_len, recipe.kv_len, recipe.seed | 1, device)
    allowed |= torch.eye(recipe.q_len, dtype=torch.bool, device=device)  # no empty rows
    scale = recipe.attention_scale
    try:
        from_float = backend.attention(q, k, v, allowed=additive_mask(allowed, q.dtype), scale=scale)
    except TypeError:
        return  # allowed: a backend may take bool masks only
    from_bool = backend.attention(q, k, v, allowed=allowed, scale=scale)
    compare(
        from_float, from_bool.detach().cpu().double(), v, clause="ATTN-FLOAT-MASK",
        context=describe(backend, device, "attention", recipe=recipe, mask=f"additive {q.dtype}"),
        expected_as="backend's bool-mask result",
    )  # fmt: skip


@pytest.mark.clause("ATTN-FLOAT-MASK-REJECT")
@pytest.mark.op("attention")
@pytest.mark.parametrize("q_dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_should_reject_a_float32_mask_with_half_queries(backend, device, q_dtype):
    """A float32 0/-inf mask with fp16/bf16 queries (the SANA bug) raises TypeError."""
    q = torch.randn(1, 2, 4, 16, device=device).to(q_dtype)
    allowed = torch.ones(4, 4, dtype=torch.bool, device=device).tril()
    mask = additive_mask(allowed, torch.float32)
    check_raises(
        TypeError,
        lambda: backend.attention(q, q, q, allowed=mask, scale=0.25),
        clause="ATTN-FLOAT-MASK-REJECT",
        context=f"backend {backend.name!r}: attention with a float32 mask and {q_dtype} queries "
        "(NPU SDPA rejects it; CPU SDPA silently accepts it)",
    )


@pytest.mark.clause("ATTN-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad attention input raises ValueError naming the argument."""
    check_backend_raises(case, backend, device)


# --- ATTN-NAN: a NaN reaches exactly the rows that can see it ---------------------------------------


def compare_nan(out, want, v, keep, *, clause, context, valid_keys=None):
    """assert_close (NaN only where the oracle has NaN) on the rows ``keep`` [B, Hq, Sq] selects; the
    absolute term scaled by the clean values ``v`` (ATTN-TOL)."""
    check_output(out, want, clause=clause, context=context, dtype=v.dtype, device=v.device)
    keep = keep.cpu()[..., None]
    out, want = torch.where(keep, out.detach().cpu(), 0), torch.where(keep, want, 0)
    scale = value_scale(v, want.shape[1], valid_keys)
    assert_close(out, want, clause=clause, family=FAMILY, atol_scale=scale, context=context)


@pytest.mark.clause("ATTN-NAN")
@pytest.mark.op("prefill_attention")
@NAN_EXAMPLES
@given(
    data=st.data(),
    recipe=attention_recipes(max_len=20, dtypes=(torch.float32, torch.bfloat16)),
    padding=st.sampled_from(PADDING_PATTERNS),
)
def test_prefill_nan_reaches_exactly_the_rows_that_see_it(backend, device, data, recipe, padding):
    """One NaN in a valid token's q, k or v: the rows that see it are NaN where the oracle is (its
    column for v, all of it for q and k), not zeros; every other batch element, head and row that
    cannot be excused (part 3) matches the oracle exactly as without it."""
    sliding_window = data.draw(windows(recipe.kv_len), label="sliding_window")
    padding_mask = make_padding_mask(padding, recipe.batch, recipe.kv_len, recipe.seed)
    valid = (
        torch.ones(recipe.batch, recipe.kv_len, dtype=torch.bool) if padding_mask is None else padding_mask
    )
    positions = [valid[b].nonzero().flatten().tolist() or [0] for b in range(recipe.batch)]
    site = data.draw(nan_sites(recipe, positions), label="nan_site")
    clean = recipe.make(device)
    q, k, v = put_nan(clean, site)
    scale = oracle.default_scale(recipe.head_dim)
    on_device = padding_argument(padding_mask, device, data, recipe)
    out = backend.prefill_attention(
        q, k, v, sliding_window=sliding_window, padding_mask=on_device, scale=scale
    )
    want = oracle.prefill_attention(
        q.cpu(), k.cpu(), v.cpu(), sliding_window=sliding_window, padding_mask=padding_mask, scale=scale
    )
    allowed = oracle.encoder_attention_mask(
        recipe.kv_len, sliding_window=sliding_window, padding_mask=padding_mask
    )
    allowed = allowed.expand(recipe.batch, 1, recipe.kv_len, recipe.kv_len)[:, 0]
    keep = valid[:, None, :] & ~excused_rows(site, allowed, recipe.q_heads, recipe.kv_heads)
    context = describe(
        backend, device, "prefill_attention", recipe=recipe, sliding_window=sliding_window,
        padding=padding, nan_at=site,
    )  # fmt: skip
    compare_nan(out, want, clean[2], keep, clause="ATTN-NAN", context=context, valid_keys=padding_mask)


@pytest.mark.clause("ATTN-NAN")
@pytest.mark.op("decode_attention")
@NAN_EXAMPLES
@given(data=st.data(), recipe=attention_recipes(same_len=False, q_len=1, max_len=24, dtypes=(torch.float32,)))
def test_decode_nan_reaches_exactly_the_rows_that_see_it(backend, device, data, recipe):
    """One NaN in the decode query or in a cache row inside the window, NaN in every stale row: the
    sequence that sees it is NaN where the oracle is, every other sequence matches it exactly."""
    seq_lens = data.draw(decode_lengths(recipe.batch, recipe.kv_len), label="seq_lens")
    sliding_window = data.draw(windows(recipe.kv_len), label="sliding_window")
    window = recipe.kv_len if sliding_window is None else sliding_window
    positions = [list(range(max(0, n - window), n)) for n in seq_lens.tolist()]
    site = data.draw(nan_sites(recipe, positions), label="nan_site")
    if site[0] == "q":
        site = (*site[:3], 0, site[4])  # the query has one row
    clean = recipe.make(device)
    q, k, v = put_nan(clean, site)
    k, v = (poison_stale_rows(t, seq_lens, float("nan")) for t in (k, v))
    scale = oracle.default_scale(recipe.head_dim)
    out = backend.decode_attention(
        q, k, v, lengths_argument(seq_lens, recipe, device), sliding_window=sliding_window, scale=scale
    )
    want = oracle.decode_attention(
        q.cpu(), k.cpu(), v.cpu(), seq_lens, sliding_window=sliding_window, scale=scale
    )
    valid_keys = torch.arange(recipe.kv_len)[None, :] < seq_lens[:, None]
    context = describe(
        backend, device, "decode_attention", recipe=recipe, seq_lens=seq_lens.tolist(),
        sliding_window=sliding_window, nan_at=site, stale_rows="nan",
    )  # fmt: skip
    keep = torch.ones(recipe.batch, recipe.q_heads, 1, dtype=torch.bool)
    compare_nan(out, want, clean[2], keep, clause="ATTN-NAN", context=context, valid_keys=valid_keys)

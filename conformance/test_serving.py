"""Conformance properties for spec/serving.md: paged, ragged and extend attention, windows per layer."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.serving import ERRORS
from conformance.checks import assert_close, describe
from conformance.harness import profiles
from conformance.strategies.common import strided_view
from conformance.strategies.nan import compared_serving_rows, serving_nan_sites
from conformance.strategies.serving import (
    METADATA_VIEWS,
    MIXED_DIMS,
    POISONS,
    SOME_LONG,
    contiguous,
    extend_rows,
    poison_value,
    serving_recipes,
    sink_values,
    windows,
)
from conformance.tolerances import value_scale
from reference import serving
from reference.attention import decode_attention

FAMILY = "attention"  # ATTN-TOL (spec/attention.md) compares serving outputs too
# ATTN-NAN/SERVE-NAN: a third of the profile's examples (profiles.share_of_examples).
NAN_EXAMPLES = profiles.share_of_examples(1 / 3)
# SERVE-SINKS: its two properties (without and with softcap) share the examples one drew before.
SINK_EXAMPLES = profiles.share_of_examples(1 / 2)
F32 = (torch.float32,)
SOFTCAPS = (1.0, 5.0, 30.0, 50.0)


def options(recipe, *, sliding_window=None, softcap=None, sinks=None) -> dict:
    """The keywords of paged_attention beside the tensors; the recipe's scale (ATTN-SCALE)."""
    scale = recipe.attention_scale
    return {"sliding_window": sliding_window, "softcap": softcap, "sinks": sinks, "scale": scale}


def run(impl, batch, opts: dict, device=None):
    """``impl.paged_attention`` on ``batch`` (sinks moved to ``device``, the batch's by default, and a
    strided view there when the batch's metadata are: SERVE-METADATA-VIEWS)."""
    args, meta = batch.args()
    sinks = opts["sinks"]
    if sinks is not None:
        sinks = sinks.to(device or batch.device)
        sinks = strided_view(sinks) if batch.recipe.metadata_layout == METADATA_VIEWS else sinks
    moved = {**opts, "sinks": sinks}
    return impl.paged_attention(*args, **meta, **moved)


def oracle(batch, opts: dict) -> torch.Tensor:
    """The float64 oracle on CPU copies."""
    return run(serving, batch.cpu(), opts, "cpu")


def packed_value_scale(batch) -> torch.Tensor:
    """ATTN-TOL per row of the packed output: max(1, max_j |v_j|) over the row's sequence, per head."""
    parts = []
    for values, rows in zip(batch.values, batch.row_slices(), strict=True):
        per_head = value_scale(values.permute(1, 0, 2)[None], batch.recipe.q_heads)[0, :, 0]  # [Hq, 1]
        parts.append(per_head.expand(rows.stop - rows.start, -1, -1))
    return torch.cat(parts)


def compare(out, want, batch, *, clause: str, context: str, expected_as: str = "expected") -> None:
    """assert_close by ATTN-TOL, the output in q's dtype on q's device (SERVE)."""
    assert_close(
        out, want, clause=clause, context=context, family=FAMILY, atol_scale=packed_value_scale(batch),
        dtype=batch.q.dtype, device=batch.device, expected_as=expected_as,
    )  # fmt: skip


def check_oracle(backend, device, recipe, *, clause: str, poison=None, evict=False, **chosen) -> None:
    """The backend on ``recipe`` (poisoned where nothing may read) against the oracle on clean data."""
    clean = recipe.make(device)
    opts = options(recipe, **chosen)
    batch = clean
    if poison is not None:
        value = poison_value(poison, recipe.dtype)
        batch = clean.poison(value, evict_window=chosen.get("sliding_window") if evict else None)
    context = describe(backend, device, "paged_attention", recipe=recipe, poison=poison, **chosen)
    compare(run(backend, batch, opts), oracle(clean, opts), clean, clause=clause, context=context)


def same_backend(out, want, batch, *, clause: str, context: str) -> None:
    """A metamorphic comparison: two results of one backend, the second (its one-shot or reference
    run) taken as the expected, and named so in the message."""
    compare(out, want.detach().cpu().double(), batch, clause=clause, context=context,
            expected_as="backend's own reference run")  # fmt: skip


@pytest.mark.clause("SERVE")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes())
def test_paged_attention_matches_oracle(backend, device, data, recipe):
    """Ragged paged batches of decode, extend and prefill sequences match SERVE, with or without W."""
    window = data.draw(windows(recipe), label="sliding_window")
    check_oracle(backend, device, recipe, clause="SERVE", sliding_window=window)


@pytest.mark.clause("SERVE-PAGED")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(), poison=st.sampled_from(POISONS))
def test_unread_slots_never_influence(backend, device, data, recipe, poison):
    """Slots past L_b, spare and foreign blocks filled with NaN or the dtype's huge value change nothing."""
    window = data.draw(windows(recipe), label="sliding_window")
    check_oracle(backend, device, recipe, clause="SERVE-PAGED", poison=poison, sliding_window=window)


@pytest.mark.clause("SERVE-PAGED")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(dtypes=F32))
def test_paged_equals_contiguous(backend, device, data, recipe):
    """Another block size and a permuted pool give the rows of one contiguous run per sequence."""
    opts = options(recipe, sliding_window=data.draw(windows(recipe), label="sliding_window"))
    paged, flat = recipe.make(device), contiguous(recipe).make(device)
    context = describe(backend, device, "paged_attention, paged vs contiguous", recipe=recipe, **opts)
    same_backend(run(backend, paged, opts), run(backend, flat, opts), paged, clause="SERVE-PAGED",
                 context=context)  # fmt: skip


@pytest.mark.clause("SERVE-EXTEND")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(kinds=("extend",), dtypes=F32))
def test_extend_matches_oracle(backend, device, data, recipe):
    """Extend batches (1 < n_b < L_b) attend the prefix bottom-right aligned, W < L often, in float32."""
    window = data.draw(st.one_of(st.none(), st.integers(1, recipe.max_len - 1)), label="sliding_window")
    check_oracle(backend, device, recipe, clause="SERVE-EXTEND", sliding_window=window)


@pytest.mark.clause("SERVE-EXTEND")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(layout=("prefill",), dtypes=F32))
def test_chunks_equal_one_prefill(backend, device, data, recipe):
    """A sequence computed in 2-3 chunks on a growing cache gives the rows of one prefill call."""
    length = recipe.seq_lens[0]
    assume(length >= 2)
    cuts = sorted(data.draw(st.sets(st.integers(1, length - 1), min_size=1, max_size=2), label="cuts"))
    opts = options(recipe, sliding_window=data.draw(windows(recipe), label="sliding_window"))
    full = recipe.make(device)
    chunks = []
    for start, stop in zip([0, *cuts], [*cuts, length], strict=True):
        future = full.poison(float("nan"), stops=(stop,))  # positions >= stop: not written yet
        future.q = full.q[start:stop]
        future.cu_seqlens_q = torch.tensor([0, stop - start], dtype=recipe.index_dtype, device=device)
        future.seq_lens = torch.tensor([stop], dtype=recipe.index_dtype, device=device)
        chunks.append(run(backend, future, opts))
    context = describe(backend, device, "paged_attention in chunks", recipe=recipe, cuts=cuts, **opts)
    same_backend(torch.cat(chunks), run(backend, full, opts), full, clause="SERVE-EXTEND", context=context)


@pytest.mark.clause("SERVE-RAGGED")
@pytest.mark.op("paged_attention")
@given(
    data=st.data(),
    layout=st.sampled_from(
        [
            ("decode", "extend"),
            ("extend", "decode", "extend"),
            ("prefill", "decode", "extend"),
            ("extend", "prefill", "decode"),
        ]
    ),
)
def test_mixed_batch_equals_sequences_alone(backend, device, data, layout):
    """Each sequence of a decode + extend + prefill batch gives the rows it gives alone."""
    recipe = data.draw(serving_recipes(layout=layout, dtypes=F32), label="recipe")
    # Half the windows below the decoding sequence's length: its one query must stay windowed.
    decode_len = recipe.seq_lens[layout.index("decode")]
    below_decode = st.integers(1, max(1, decode_len - 1))
    window = data.draw(st.one_of(windows(recipe), below_decode), label="sliding_window")
    opts = options(recipe, sliding_window=window)
    batch = recipe.make(device)
    alone = []
    for b, rows in enumerate(batch.row_slices()):
        one = copy.copy(batch)
        one.q, one.block_table = batch.q[rows], batch.block_table[b : b + 1]
        one.cu_seqlens_q = torch.tensor([0, rows.stop - rows.start], dtype=recipe.index_dtype, device=device)
        one.seq_lens = batch.seq_lens[b : b + 1]
        alone.append(run(backend, one, opts))
    context = describe(backend, device, "paged_attention, batch vs alone", recipe=recipe, **opts)
    same_backend(run(backend, batch, opts), torch.cat(alone), batch, clause="SERVE-RAGGED", context=context)


def dense_decode_call(batch, generator):
    """ATTN-DECODE's dense k, v [B, Hkv, S, D] (NaN past L_b) and the same cache paged by
    reference.serving.contiguous_to_paged with its blocks permuted."""
    recipe, length = batch.recipe, batch.recipe.max_len

    def dense(per_sequence):
        pad = torch.nn.functional.pad
        nan = float("nan")
        padded = [pad(t.permute(1, 0, 2), (0, 0, 0, length - t.shape[0]), value=nan) for t in per_sequence]
        return torch.stack(padded)

    k, v = dense(batch.keys), dense(batch.values)
    k_cache, v_cache, table = serving.contiguous_to_paged(k, v, block_size=recipe.block_size)
    perm = torch.randperm(k_cache.shape[0], generator=generator)
    moved_k, moved_v = torch.empty_like(k_cache), torch.empty_like(v_cache)
    moved_k[perm], moved_v[perm] = k_cache, v_cache
    return k, v, moved_k, moved_v, perm[table].to(recipe.index_dtype)


@pytest.mark.clause("SERVE-DECODE")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(kinds=("decode",), long=SOME_LONG))
def test_decode_matches_dense_decode(backend, device, data, recipe):
    """All n_b = 1 on a permuted contiguous_to_paged cache equals ATTN-DECODE on the dense cache."""
    opts = options(recipe, sliding_window=data.draw(windows(recipe), label="sliding_window"))
    batch = recipe.make(device)
    k, v, k_cache, v_cache, table = dense_decode_call(batch, torch.Generator().manual_seed(recipe.seed))
    lengths = torch.tensor(recipe.seq_lens)
    out = backend.paged_attention(
        batch.q, k_cache.to(device), v_cache.to(device), block_table=table.to(device),
        cu_seqlens_q=batch.cu_seqlens_q, seq_lens=batch.seq_lens, **opts,
    )  # fmt: skip
    want = decode_attention(batch.q.cpu()[:, :, None], k, v, lengths, sliding_window=opts["sliding_window"],
                            scale=opts["scale"])[:, :, 0]  # fmt: skip
    context = describe(backend, device, "paged_attention vs decode_attention", recipe=recipe, **opts)
    compare(out, want, batch, clause="SERVE-DECODE", context=context)


@pytest.mark.clause("SERVE-DECODE")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(kinds=("decode",), dtypes=F32), extra=st.integers(1, 3))
def test_decode_equals_last_row_of_extend(backend, device, data, recipe, extra):
    """A decode row equals the last row of the same backend's extend call ending with that query."""
    opts = options(recipe, sliding_window=data.draw(windows(recipe), label="sliding_window"))
    decode, extend = recipe.make(device), extend_rows(recipe, extra).make(device)
    last = [rows.stop - 1 for rows in extend.row_slices()]
    extend.q = extend.q.clone()
    extend.q[last] = decode.q  # the caches are the same: only q depends on the query lengths
    context = describe(backend, device, "paged_attention, decode vs extend", recipe=recipe, extra=extra)
    same_backend(run(backend, decode, opts), run(backend, extend, opts)[last], decode, clause="SERVE-DECODE",
                 context=context)  # fmt: skip


@pytest.mark.clause("SERVE-EVICT")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(long=SOME_LONG))
def test_evicted_positions_are_never_read(backend, device, data, recipe):
    """With W, positions before e_b (and every unread slot) filled with NaN change nothing."""
    window = data.draw(st.integers(1, max(1, recipe.max_len - 1)), label="sliding_window")
    check_oracle(
        backend, device, recipe, clause="SERVE-EVICT", poison="nan", evict=True, sliding_window=window
    )


@pytest.mark.clause("SERVE-HEAD-DIMS")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(dims=MIXED_DIMS))
def test_value_head_dim_may_differ(backend, device, data, recipe):
    """Dv != Dqk (192/128-like): the output has Dv columns and matches the oracle."""
    window = data.draw(windows(recipe), label="sliding_window")
    check_oracle(backend, device, recipe, clause="SERVE-HEAD-DIMS", sliding_window=window)


@pytest.mark.clause("SERVE-SOFTCAP")
@pytest.mark.op("paged_attention")
@given(
    data=st.data(),
    recipe=serving_recipes(magnitudes=(2.0, 4.0, 8.0), max_scale_ratio=1.0),
    softcap=st.sampled_from(SOFTCAPS),
)
def test_softcap_matches_oracle(backend, device, data, recipe, softcap):
    """Scores large enough that c * tanh(s / c) matters (q, k scaled up), with or without W."""
    window = data.draw(windows(recipe), label="sliding_window")
    check_oracle(backend, device, recipe, clause="SERVE-SOFTCAP", sliding_window=window, softcap=softcap)


def draw_sinks(data, recipe, in_q_dtype: bool) -> torch.Tensor:
    """Per-head sink logits in float32 or q's dtype (SERVE-SINKS)."""
    logits = data.draw(
        st.lists(sink_values(), min_size=recipe.q_heads, max_size=recipe.q_heads), label="sinks"
    )
    return torch.tensor(logits, dtype=recipe.dtype if in_q_dtype else torch.float32)


@pytest.mark.clause("SERVE-SINKS")
@pytest.mark.op("paged_attention")
@SINK_EXAMPLES
@given(data=st.data(), recipe=serving_recipes(magnitudes=(1.0, 2.0)), in_q_dtype=st.booleans())
def test_sinks_match_oracle(backend, device, data, recipe, in_q_dtype):
    """Per-head sink logits (float32 or q's dtype), with or without a window, match the oracle."""
    sinks = draw_sinks(data, recipe, in_q_dtype)
    window = data.draw(windows(recipe), label="sliding_window")
    check_oracle(backend, device, recipe, clause="SERVE-SINKS", sliding_window=window, sinks=sinks)


@pytest.mark.clause("SERVE-SINKS")
@pytest.mark.op("paged_attention")
@SINK_EXAMPLES
@given(data=st.data(), recipe=serving_recipes(magnitudes=(1.0, 2.0)), in_q_dtype=st.booleans())
def test_sinks_with_softcap_match_oracle(backend, device, data, recipe, in_q_dtype):
    """Sinks combined with softcap (the sink logit is not softcapped), with or without a window: a
    property of its own, so a backend without softcap (SERVE-SOFTCAP unsupported) still has its sinks
    checked by the one above."""
    sinks = draw_sinks(data, recipe, in_q_dtype)
    window = data.draw(windows(recipe), label="sliding_window")
    softcap = data.draw(st.sampled_from(SOFTCAPS), label="softcap")
    check_oracle(backend, device, recipe, clause="SERVE-SINKS", sliding_window=window, softcap=softcap,
                 sinks=sinks)  # fmt: skip


@pytest.mark.clause("SERVE-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad serving input raises ValueError naming the argument."""
    check_backend_raises(case, backend, device)


# --- SERVE-NAN: a NaN reaches exactly the rows that can see it --------------------------------------


@pytest.mark.clause("SERVE-NAN")
@pytest.mark.op("paged_attention")
@NAN_EXAMPLES
@given(data=st.data(), recipe=serving_recipes(dtypes=F32, dims=((16, 16), (32, 32))))
def test_nan_reaches_exactly_the_rows_that_see_it(backend, device, data, recipe):
    """One NaN in a query or in a visible cache slot, NaN in every unread slot: the rows that see it
    are NaN where the oracle is (not zeros); the other rows compared (part 3) match the oracle."""
    window = data.draw(windows(recipe), label="sliding_window")
    batch = recipe.make(device).poison(float("nan"))
    site = data.draw(serving_nan_sites(batch, window), label="nan_site")
    which, where, head, _ = site
    column = data.draw(st.integers(0, getattr(batch, which).shape[-1] - 1), label="nan_column")
    tensor = getattr(batch, which).clone()
    tensor[(where, head, column) if which == "q" else (*where, head, column)] = float("nan")
    poisoned = batch.with_caches(
        tensor if which == "k_cache" else batch.k_cache, tensor if which == "v_cache" else batch.v_cache
    )
    poisoned.q = tensor if which == "q" else batch.q
    opts = options(recipe, sliding_window=window)
    out, want = run(backend, poisoned, opts), oracle(poisoned, opts)
    keep = compared_serving_rows(batch, site, window)
    context = describe(backend, device, "paged_attention", recipe=recipe, sliding_window=window,
                       nan_at=(*site[:3], column), unread_slots="nan")  # fmt: skip
    keep = keep[:, :, None]
    compare(torch.where(keep.to(out.device), out, 0), torch.where(keep, want, 0), batch, clause="SERVE-NAN",
            context=context)  # fmt: skip

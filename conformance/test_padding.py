"""Conformance properties for spec/padding.md: padded batches never change the real rows, and no
result depends on uninitialised memory.

Every comparison is the padded op's real rows against the family's oracle on the real rows alone,
by the family's own rule (padding_cases.RowCase.judge, ATTN-TOL for serving): a padded batch gets no
tolerance of its own. The properties draw a sixth of the profile's examples (at least 5): a kernel
that mixes rows or reads unwritten memory does so on most draws.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from backends import not_implemented_reason
from conformance.checks import check, describe
from conformance.harness import profiles
from conformance.padding_cases import OPS, allocations_are_poisoned, poisoned_allocations, row_case
from conformance.strategies.padding import NULL_FILLS, ServePadding, fill_rows, row_paddings, serve_paddings
from conformance.strategies.serving import poison_value, serving_recipes, windows
from conformance.test_serving import check_oracle, compare, options, oracle
from reference import kv_cache

FEW = profiles.share_of_examples(1 / 6)
# PAD-UNINIT: one dtype. An uninitialised read shows in any; a compiled backend recompiles once per
# dtype it is first called with in deterministic mode (spec/padding.md, Sources).
UNINIT_DTYPES = (torch.float32,)
ROW_OPS = [pytest.param(op, marks=pytest.mark.op(op), id=op) for op in OPS]
# PAD-SERVE: fresh caches, q and metadata (their views are SERVE-LAYOUT's); every batch kind.
PLAIN = dict(cache_layouts=("separate",), q_layouts=("separate",), metadata_layouts=("contiguous",))


@pytest.mark.clause("PAD-ROWS")
@pytest.mark.parametrize("op", ROW_OPS)
@FEW
@given(data=st.data())
def test_padding_rows_leave_real_rows(backend, device, op, data):
    """Rows appended up to a capture size, holding zeros, stale rows, huge values or NaN: the real
    rows are the oracle's on the real rows alone."""
    case = row_case(op, data, device)
    padding = data.draw(row_paddings(case.rows[0].shape[0]), label="padding")
    context = f"{describe(backend, device, op)}: {case.about}, {padding.describe()}"
    got = case.run(backend, case.padded(padding), clause="PAD-ROWS", context=context)
    real = case.rows[0].shape[0]
    case.judge(tuple(t[:real] for t in got), case.oracle(), case.rows, "PAD-ROWS", context)


def _require_poison(device) -> None:
    """PAD-UNINIT's poison must reach the device, or the property could not fail: a skip, not a pass."""
    if not allocations_are_poisoned(device):
        pytest.skip(f"PyTorch on {device} does not fill uninitialised memory: PAD-UNINIT cannot poison it")


@pytest.mark.clause("PAD-UNINIT")
@pytest.mark.parametrize("op", ROW_OPS)
@FEW
@given(data=st.data())
def test_no_result_reads_uninitialised_memory(backend, device, op, data):
    """Every tensor the backend allocates uninitialised holds NaN: every row is still the oracle's."""
    _require_poison(device)
    case = row_case(op, data, device, dtypes=UNINIT_DTYPES)
    context = f"{describe(backend, device, op)}: {case.about}, allocations poisoned"
    with poisoned_allocations():
        got = case.run(backend, case.rows, clause="PAD-UNINIT", context=context)
    case.judge(got, case.oracle(), case.rows, "PAD-UNINIT", context)


@pytest.mark.clause("PAD-UNINIT")
@pytest.mark.op("paged_attention")
@FEW
@given(data=st.data(), recipe=serving_recipes(dtypes=UNINIT_DTYPES, **PLAIN))
def test_paged_attention_reads_no_uninitialised_memory(backend, device, data, recipe):
    """Allocations poisoned and every cache slot no sequence may read NaN: SERVE's result."""
    _require_poison(device)
    window = data.draw(windows(recipe), label="sliding_window")
    with poisoned_allocations():
        check_oracle(backend, device, recipe, clause="PAD-UNINIT", poison="nan", sliding_window=window)


def _with_null_block(cache: torch.Tensor, fill: str, seed: int) -> torch.Tensor:
    """``cache`` [num_blocks, ...] with the reserved null block prepended as block 0."""
    shape = (1, *cache.shape[1:])
    if fill == "zeros":
        block = torch.zeros(shape, dtype=torch.float64)
    elif fill == "random":
        block = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    else:
        block = torch.full(shape, poison_value(fill, cache.dtype), dtype=torch.float64)
    return torch.cat([block.to(cache.dtype).to(cache.device), cache])


def _padded_metadata(batch, padding: ServePadding) -> dict:
    """block_table (real ids + 1: block 0 is the null block), cu_seqlens_q and seq_lens with the
    padded requests appended, each one query of a sequence of length 1, on the batch's device."""
    table = batch.block_table.cpu().long()
    table = torch.where(table >= 0, table + 1, table)
    n = padding.requests
    if padding.table == "null":
        rows = torch.zeros(n, table.shape[1], dtype=torch.long)
    else:  # a finished request's row left in the buffer; the first entry is what length 1 reads
        picks = torch.randint(table.shape[0], (n,), generator=torch.Generator().manual_seed(padding.seed))
        rows = table[picks].clone()
        rows[:, 0] = 0
    starts = batch.cu_seqlens_q.cpu().long()
    queries = 0 if padding.empty else 1  # vLLM's zero-length form repeats T; sglang's adds one query
    meta = {
        "block_table": torch.cat([table, rows]),
        "cu_seqlens_q": torch.cat([starts, starts[-1] + queries * torch.arange(1, n + 1)]),
        "seq_lens": torch.cat([batch.seq_lens.cpu().long(), torch.full((n,), queries, dtype=torch.long)]),
    }
    return {k: t.to(batch.recipe.index_dtype).to(batch.device) for k, t in meta.items()}


def _padded_q(batch, padding: ServePadding) -> torch.Tensor:
    if padding.empty:
        return batch.q
    return torch.cat([batch.q, fill_rows(batch.q, padding.requests, padding.q_fill, padding.seed)])


def _check_real_rows(out, batch, padding, opts, *, clause: str = "PAD-SERVE", context: str) -> None:
    """The output has a row per query row, padded ones included; the real rows are SERVE's on the
    real batch alone (ATTN-TOL)."""
    real = batch.q.shape[0]
    rows = real + padding.rows
    check(
        isinstance(out, torch.Tensor) and out.dim() == 3 and out.shape[0] == rows,
        clause=clause,
        message=f"{context}: returned {getattr(out, 'shape', type(out).__name__)}, expected {rows} rows",
    )
    compare(out[:real], oracle(batch, opts), batch, clause=clause, context=context)


@pytest.mark.clause("PAD-SERVE")
@pytest.mark.op("paged_attention")
@FEW
@given(data=st.data(), recipe=serving_recipes(**PLAIN))
def test_padded_requests_leave_real_rows(backend, device, data, recipe):
    """Padded requests (one query, length 1) reading the null block (zeros, random or huge keys) or a
    stale table row, their query rows holding garbage: the real rows are SERVE's on the real batch."""
    _check_padded_read(backend, device, data, recipe, "PAD-SERVE", NULL_FILLS)


@pytest.mark.clause("PAD-SERVE-NAN")
@pytest.mark.op("paged_attention")
@profiles.should_examples(1 / 6)
@given(data=st.data(), recipe=serving_recipes(**PLAIN))
def test_should_keep_a_nan_null_block_from_real_rows(backend, device, data, recipe):
    """The null block the padded requests read holds NaN: the real rows are still SERVE's."""
    _check_padded_read(backend, device, data, recipe, "PAD-SERVE-NAN", ("nan",))


@pytest.mark.clause("PAD-SERVE-EMPTY")
@pytest.mark.op("paged_attention")
@pytest.mark.promise("empty_requests")
@FEW
@given(data=st.data(), recipe=serving_recipes(**PLAIN))
def test_empty_padded_requests_leave_real_rows(backend, device, data, recipe):
    """vLLM's padded step: requests of zero queries and length 0 after the real ones (cu_seqlens_q
    repeats T, seq_lens 0, a null or stale table row): T rows, the real batch's under SERVE."""
    _check_padded_read(backend, device, data, recipe, "PAD-SERVE-EMPTY", NULL_FILLS, empty=True)


def _check_padded_read(backend, device, data, recipe, clause: str, null_fills, *, empty=False) -> None:
    opts = options(recipe, sliding_window=data.draw(windows(recipe), label="sliding_window"))
    padding = data.draw(serve_paddings(len(recipe.seq_lens), null_fills=null_fills, empty=empty),
                        label="padding")  # fmt: skip
    batch = recipe.make(device)
    k_cache, v_cache = (
        _with_null_block(t, padding.null_fill, padding.seed) for t in (batch.k_cache, batch.v_cache)
    )
    meta = _padded_metadata(batch, padding)
    out = backend.paged_attention(_padded_q(batch, padding), k_cache, v_cache, **meta, **opts)
    context = f"{describe(backend, device, 'paged_attention', recipe=recipe, **opts)}: {padding.describe()}"
    _check_real_rows(out, batch, padding, opts, clause=clause, context=context)


def _step_writes(batch, padding: ServePadding, short: bool):
    """A graph-padded step's two writes: the cached prefix (an earlier step), then the new tokens with
    the padded requests' tokens after them: slot -1, or (``short``) rows past slot_mapping's end.
    (key, value, slot_mapping) each; a slot counts the null block 0 first."""
    recipe, bs = batch.recipe, batch.recipe.block_size
    calls = [([], [], []), ([], [], [])]
    for b, (keys, values, row) in enumerate(zip(batch.keys, batch.values, batch.ids, strict=True)):
        first_new = recipe.seq_lens[b] - recipe.query_lens[b]
        for p in range(recipe.seq_lens[b]):
            part = calls[p >= first_new]
            slot = (row[p // bs] + 1) * bs + p % bs
            part[0].append(keys[p]), part[1].append(values[p]), part[2].append(slot)
    out = [(torch.stack(k), torch.stack(v), torch.tensor(s)) for k, v, s in calls if s]
    key, value, slots = out[-1]
    n = padding.requests
    key, value = (torch.cat([t, fill_rows(t, n, padding.q_fill, padding.seed)]) for t in (key, value))
    out[-1] = (key, value, slots if short else torch.cat([slots, torch.full((n,), -1)]))
    return out


@pytest.mark.clause("PAD-SERVE")
@pytest.mark.op("write_kv_cache")
@FEW
@given(data=st.data(), recipe=serving_recipes(**PLAIN), short=st.booleans())
def test_padded_step_writes_and_reads_real_tokens_only(backend, device, data, recipe, short):
    """A padded step into a NaN pool: the write stores exactly the oracle's (padded tokens nowhere),
    and the padded read's real rows are SERVE's on the real batch."""
    reason = not_implemented_reason(backend, "paged_attention")
    if reason is not None:  # the read side is missing: the step is not implemented
        pytest.skip(reason)
    recipe = dataclasses.replace(recipe, shared_prefix=0)  # each sequence writes its own blocks
    opts = options(recipe, sliding_window=data.draw(windows(recipe), label="sliding_window"))
    padding = data.draw(serve_paddings(len(recipe.seq_lens)), label="padding")
    clean = recipe.make("cpu")
    shape = clean.k_cache.shape[:3]
    pools = {}
    for where, impl, on in (("backend", backend, device), ("oracle", kv_cache, "cpu")):
        # NaN in every slot but the null block's: a slot nobody writes holds garbage (PAD-UNINIT)
        caches = [
            _with_null_block(torch.full((*shape, d), float("nan")).to(recipe.dtype).to(on), padding.null_fill,
                             padding.seed)
            for d in (recipe.head_dim, recipe.value_dim)
        ]  # fmt: skip
        for key, value, slots in _step_writes(clean, padding, short):
            impl.write_kv_cache(key.to(on), value.to(on), *caches, slots.to(recipe.index_dtype).to(on))
        pools[where] = caches
    context = f"{describe(backend, device, 'write_kv_cache then paged_attention', recipe=recipe, **opts)}: "
    context += f"{padding.describe()}, {'rows past slot_mapping' if short else 'slot -1'}"
    for name, got, want in zip(("k_cache", "v_cache"), pools["backend"], pools["oracle"], strict=True):
        differ = got.cpu().view(torch.uint8).ne(want.view(torch.uint8)).reshape(*want.shape, -1).any(-1)
        where = differ.nonzero()[:1].tolist()
        check(not differ.any(), clause="PAD-SERVE",
              message=f"{context}: {name}: {int(differ.sum())} elements differ from the oracle's write, "
              f"first at {where}")  # fmt: skip
    batch = recipe.make(device)
    meta = _padded_metadata(batch, padding)
    out = backend.paged_attention(_padded_q(batch, padding), *pools["backend"], **meta, **opts)
    _check_real_rows(out, batch, padding, opts, context=context)

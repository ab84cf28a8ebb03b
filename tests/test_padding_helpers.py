"""The padding properties' machinery (spec/padding.md) checked on its own: the poison reaches what
PyTorch allocates and the modes come back; every draw pads; the padded serving batch is a valid SERVE
input whose padded requests really read the null block (the properties could not pass vacuously)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.padding_cases import allocations_are_poisoned, poisoned_allocations
from conformance.strategies.padding import FILLS, ServePadding, fill_rows, padded_size, row_paddings
from conformance.strategies.serving import ServingRecipe
from conformance.test_padding import _padded_metadata, _padded_q, _with_null_block
from reference import serving


def test_poisoned_allocations_fill_empty_tensors_and_restore_the_modes():
    """PAD-UNINIT: inside, empty, empty_like and an integer empty hold NaN and the largest value;
    after, the deterministic mode and its warn_only flag are what they were (off, then on and strict)."""
    for enabled in (False, True):
        torch.use_deterministic_algorithms(enabled)
        try:
            with poisoned_allocations():
                assert torch.empty(5).isnan().all() and torch.empty_like(torch.ones(2, 3)).isnan().all()
                assert (torch.empty(4, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
            assert torch.are_deterministic_algorithms_enabled() is enabled
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
        finally:
            torch.use_deterministic_algorithms(False)
    assert allocations_are_poisoned("cpu")


@settings(max_examples=40, database=None, derandomize=True)
@given(data=st.data(), real=st.integers(1, 80))
def test_every_padding_adds_rows(data, real):
    """PAD-ROWS never draws an unpadded batch: at least one row, up to the capture size above."""
    padding = data.draw(row_paddings(real))
    assert padding.rows >= 1 and padded_size(real) > real
    assert padding.rows in (padded_size(real) - real, 1, 2, 3)


def test_fills_are_what_they_say():
    """zeros, copies of real rows, huge finite values, NaN and inf: shaped as the rows, their dtype."""
    real = torch.randn(5, 3, 4, dtype=torch.bfloat16)
    rows = {fill: fill_rows(real, 6, fill, seed=1) for fill in FILLS}
    assert all(t.shape == (6, 3, 4) and t.dtype == torch.bfloat16 for t in rows.values())
    assert not rows["zeros"].any()
    assert all(any(torch.equal(r, x) for x in real) for r in rows["stale"])
    assert rows["huge"].isfinite().all() and (rows["huge"].abs() > 1e37).all()
    assert rows["nan"].isnan().any() and rows["nan"].isinf().any()


def test_padded_requests_read_the_null_block():
    """PAD-SERVE's padded batch through the oracle: the padded requests' rows read the NaN null block
    (NaN), the real rows are the real batch's, with "null" and "stale" table rows alike."""
    recipe = ServingRecipe(seq_lens=(7, 12), query_lens=(1, 3), block_size=4, kv_heads=2, group=2,
                           head_dim=8, value_dim=8, dtype=torch.float32, seed=3)  # fmt: skip
    batch = recipe.make("cpu")
    opts = dict(sliding_window=None, softcap=None, sinks=None, scale=recipe.attention_scale)
    want = serving.paged_attention(*batch.args()[0], **batch.args()[1], **opts)
    for table in ("null", "stale"):
        padding = ServePadding(requests=2, q_fill="zeros", null_fill="nan", table=table, seed=5)
        caches = [_with_null_block(t, "nan", padding.seed) for t in (batch.k_cache, batch.v_cache)]
        meta = _padded_metadata(batch, padding)
        out = serving.paged_attention(_padded_q(batch, padding), *caches, **meta, **opts)
        assert out.shape[0] == 4 + 2 and out[4:].isnan().all(), table
        assert torch.equal(out[:4], want), table

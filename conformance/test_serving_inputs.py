"""Conformance properties for what the field hands a serving kernel (spec/serving.md): scales other
than 1/sqrt(Dqk) (ATTN-SCALE), sequences of thousands of keys (SERVE-LONG) and strided views of q and
the caches (SERVE-LAYOUT). The other serving properties draw these too, in a fraction of examples."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.harness import profiles
from conformance.strategies.serving import (
    CACHE_LAYOUTS,
    METADATA_LAYOUTS,
    METADATA_VIEWS,
    PARTITION_EDGES,
    POISONS,
    Q_LAYOUTS,
    partition_edge_recipe,
    serving_recipes,
    windows,
)
from conformance.test_serving import check_oracle, draw_sinks

# Neither a view's strides nor the scale needs wide heads or several sequences (the other serving
# properties draw both with these views and scales too).
SMALL_DIMS = ((16, 16), (32, 32), (64, 64))


@pytest.mark.clause("SERVE-LONG")
@pytest.mark.op("paged_attention")
@given(
    data=st.data(),
    recipe=serving_recipes(kinds=("decode", "extend"), batch=1, long=(True,)),
    poison=st.sampled_from(POISONS),
)
def test_long_sequences_match_oracle(backend, device, data, recipe, poison):
    """Decodes and extends of 1025..4608 keys (several split-KV partitions, many blocks), unread
    slots poisoned, with or without W: the partitions' partial softmaxes must merge exactly."""
    window = data.draw(windows(recipe), label="sliding_window")
    check_oracle(backend, device, recipe, clause="SERVE-LONG", poison=poison, sliding_window=window)


@pytest.mark.clause("SERVE-LONG")
@pytest.mark.op("paged_attention")
@pytest.mark.parametrize("length", PARTITION_EDGES)
def test_partition_edges_match_oracle(backend, device, length):
    """Sequences one key short of, at and one past a 512-key partition boundary (2048 keys): the last
    partition full, or holding one key."""
    check_oracle(backend, device, partition_edge_recipe(length), clause="SERVE-LONG", poison="nan")


@pytest.mark.clause("SERVE-LAYOUT")
@pytest.mark.op("paged_attention")
@given(
    data=st.data(),
    recipe=serving_recipes(
        batch=1,
        dims=SMALL_DIMS,
        cache_layouts=CACHE_LAYOUTS[1:],
        q_layouts=Q_LAYOUTS[1:],
        metadata_layouts=METADATA_LAYOUTS[1:],
    ),
)
def test_views_are_read_through_their_strides(backend, device, data, recipe):
    """q a slice of a fused qkv projection, the caches the halves of one [num_blocks, 2, ...] buffer
    or an HND cache's transpose, block_table the leading columns of a wider one: the output is the
    oracle's on the same values. (Dv != Dqk, whose caches are the column ranges of one buffer, is drawn by
    SERVE-HEAD-DIMS.)"""
    window = data.draw(windows(recipe), label="sliding_window")
    check_oracle(backend, device, recipe, clause="SERVE-LAYOUT", sliding_window=window)


@pytest.mark.clause("SERVE-METADATA-VIEWS")
@pytest.mark.op("paged_attention")
@profiles.should_examples()
@given(data=st.data(), recipe=serving_recipes(dims=SMALL_DIMS, metadata_layouts=(METADATA_VIEWS,)))
def test_should_read_metadata_views(backend, device, data, recipe):
    """cu_seqlens_q, seq_lens and sinks as every other element of a buffer (block_table the leading
    columns of a wider one): the output is the oracle's on the same values."""
    window = data.draw(windows(recipe), label="sliding_window")
    with_sinks = data.draw(st.booleans(), label="with_sinks")
    sinks = draw_sinks(data, recipe, in_q_dtype=False) if with_sinks else None
    check_oracle(backend, device, recipe, clause="SERVE-METADATA-VIEWS", sliding_window=window, sinks=sinks)


@pytest.mark.clause("ATTN-SCALE")
@pytest.mark.op("paged_attention")
@given(data=st.data(), recipe=serving_recipes(batch=1, dims=SMALL_DIMS, magnitudes=(2.0,)))
def test_paged_scale_is_the_one_passed(backend, device, data, recipe):
    """Scores 4x the unit ones at a scale other than 1/sqrt(Dqk) (MLA's, YaRN's, any): a kernel that
    uses 1/sqrt(Dqk) (or its op default) whatever was passed fails."""
    ratio = data.draw(st.one_of(st.floats(0.25, 0.8), st.floats(1.25, 2.25)), label="scale / (1/sqrt(Dqk))")
    recipe = dataclasses.replace(recipe, softmax_scale=ratio * recipe.head_dim**-0.5)
    window = data.draw(windows(recipe), label="sliding_window")
    check_oracle(backend, device, recipe, clause="ATTN-SCALE", sliding_window=window)

"""Hypothesis strategies and row selections for ATTN-NAN and SERVE-NAN (spec/attention.md,
spec/serving.md): where one NaN goes, and which rows a property compares with the oracle."""

from __future__ import annotations

import torch
from hypothesis import strategies as st


@st.composite
def nan_sites(draw, recipe, positions):
    """One NaN: (tensor, batch, head, position, column), the position drawn from ``positions[b]``."""
    which = draw(st.sampled_from(("q", "k", "v")), label="nan_in")
    b = draw(st.integers(0, recipe.batch - 1), label="nan_batch")
    heads = recipe.q_heads if which == "q" else recipe.kv_heads
    head = draw(st.integers(0, heads - 1), label="nan_head")
    j = draw(st.sampled_from(positions[b]), label="nan_position")
    return which, b, head, j, draw(st.integers(0, recipe.head_dim - 1), label="nan_column")


def put_nan(tensors, site):
    """Copies of (q, k, v) with the NaN of ``site`` written in."""
    which, b, head, j, d = site
    tensors = dict(zip("qkv", tensors, strict=True))
    tensors[which] = tensors[which].clone()
    tensors[which][b, head, j, d] = float("nan")
    return tensors["q"], tensors["k"], tensors["v"]


def excused_rows(site, allowed, q_heads, kv_heads):
    """ATTN-NAN part 3: [B, Hq, Sq] True where a k/v NaN lies in the row's own sequence but is masked
    for it (``allowed`` [B, Sq, Sk]); a q NaN excuses nothing."""
    which, b, head, j, _ = site
    excused = torch.zeros(allowed.shape[0], q_heads, allowed.shape[1], dtype=torch.bool)
    if which != "q":
        group = q_heads // kv_heads
        excused[b, head * group : (head + 1) * group] = ~allowed[b, :, j]
    return excused


@st.composite
def serving_nan_sites(draw, batch, window):
    """One NaN: ("q", token, head, column) or (k_cache / v_cache, block, offset, kv head, column) at a
    position some query of its sequence may see (e_b .. L_b - 1, SERVE-EVICT)."""
    recipe = batch.recipe
    which = draw(st.sampled_from(("q", "k_cache", "v_cache")), label="nan_in")
    if which == "q":
        token = draw(st.integers(0, batch.q.shape[0] - 1), label="nan_token")
        return which, token, draw(st.integers(0, recipe.q_heads - 1), label="nan_head"), None
    b = draw(st.integers(0, len(recipe.seq_lens) - 1), label="nan_sequence")
    p = draw(st.integers(batch.first_visible(b, window), recipe.seq_lens[b] - 1), label="nan_position")
    slot = (batch.ids[b][p // recipe.block_size], p % recipe.block_size)
    return which, slot, draw(st.integers(0, recipe.kv_heads - 1), label="nan_kv_head"), None


def compared_serving_rows(batch, site, window) -> torch.Tensor:
    """SERVE-NAN: [T, Hq] True for the rows compared with the oracle: every row for a query NaN; for a
    cache NaN, the rows of the sequences holding its slot, except those of its kv head for which the
    slot lies in the sequence but is masked (part 3)."""
    recipe = batch.recipe
    which, slot, head, _ = site
    if which == "q":
        return torch.ones(batch.q.shape[0], recipe.q_heads, dtype=torch.bool)
    keep = torch.zeros(batch.q.shape[0], recipe.q_heads, dtype=torch.bool)
    bs, heads = recipe.block_size, slice(head * recipe.group, (head + 1) * recipe.group)
    for b, rows in enumerate(batch.row_slices()):
        length, n = recipe.seq_lens[b], recipe.query_lens[b]
        held = [p for p in range(length) if (batch.ids[b][p // bs], p % bs) == slot]
        if not held:
            continue
        keep[rows] = True
        for p in held:
            for r in range(n):
                position = length - n + r
                if p > position or (window is not None and position - p >= window):
                    keep[rows.start + r, heads] = False
    return keep

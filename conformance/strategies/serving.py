"""Hypothesis strategies for the serving properties (spec/serving.md): ragged paged batches.

A ``ServingRecipe`` fixes the data (q and every sequence's keys and values, from ``seed``) apart
from the layout (block size, block order, spare and padding blocks, from ``seed + 1``), so
``dataclasses.replace(recipe, block_size=..., contiguous=True)`` gives the same sequences paged
another way (the metamorphic form of SERVE-PAGED). Its ``cache_layout`` and ``q_layout`` hand the
same values to the backend as views (SERVE-LAYOUT), its ``softmax_scale`` is the scale passed
(ATTN-SCALE), and its ``long`` draws put sequences past two split-KV partitions (SERVE-LONG).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

from conformance.strategies.attention import softmax_scales
from conformance.strategies.common import (
    FLOAT_DTYPES,
    dims_fit,
    pinned,
    pinned_values,
    row_strided_view,
    seeds,
    strided_view,
)

BLOCK_SIZES = (1, 2, 3, 5, 8, 16, 128)
# spec/serving.md, Ranges: Phi-2's 80 and Phi-3's 96 inside a 128-wide head tile.
SAME_DIMS = ((16, 16), (32, 32), (64, 64), (80, 80), (96, 96), (128, 128))
# (Dqk, Dv) with Dv != Dqk: MLA-like 192/128, MLA's absorbed decode 576/512 and small look-alikes
# (SERVE-HEAD-DIMS).
MIXED_DIMS = ((192, 128), (576, 512), (24, 16), (16, 32), (64, 16), (128, 64))
# spec/serving.md, Ranges: the models' dims; MLA's in half the examples of SERVE-HEAD-DIMS.
MODEL_DIMS = ((80, 80), (96, 96), (192, 128), (576, 512))
KINDS = ("decode", "extend", "prefill")
MAX_TOKENS = 64  # T, all sequences' new queries
MAX_LEN = 96  # L_b
POISONS = ("nan", "huge")
# SERVE-LAYOUT: the caches as fresh tensors, as the key and value halves of one buffer
# ([num_blocks, 2, block_size, Hkv, D], or [..., Hkv, Dqk + Dv] when Dv != Dqk), or as the
# transposed view of an HND cache ([num_blocks, Hkv, block_size, D]); q fresh or a slice of a fused
# qkv projection ([T, (Hq + Hkv) Dqk + Hkv Dv]).
CACHE_LAYOUTS = ("separate", "kv-fused", "hnd")
Q_LAYOUTS = ("separate", "fused-qkv")
# SERVE-LAYOUT: block_table as the leading columns of a wider table ("table-view", as vLLM slices it),
# or all fresh. SERVE-METADATA-VIEWS ("views", SHOULD): that table, and cu_seqlens_q and seq_lens (and
# a property's sinks) as every other element of a buffer.
METADATA_LAYOUTS = ("contiguous", "table-view")
METADATA_VIEWS = "views"
# SERVE-LONG: sequences past two 512-key split-KV partitions, at small heads and head dims.
LONG_LEN = (1025, 4608)
# spec/serving.md, Ranges: a 512-key partition boundary at 2048 keys: one short, at, one past.
PARTITION_EDGES = (2047, 2048, 2049)
MANY_QUERIES = (65, 72)  # a long extend's queries past a 64-row query tile
LONG_BLOCK_SIZES = (1, 16, 128, 256)
LONG_DIMS = ((4, 4), (8, 8))
LONG_MIXED_DIMS = ((8, 4), (4, 8))
LONG_QUERIES = 8  # an extend's new queries (the cost is n_b x L_b)
SOME_LONG = (False,) * 7 + (True,)  # ``long`` of the properties where length matters


def poison_value(kind: str, dtype: torch.dtype) -> float:
    """NaN, or a huge finite value: 1e30 rounded to the dtype's largest finite (SERVE-PAGED)."""
    if kind == "nan":
        return float("nan")
    return min(1e30, torch.finfo(dtype).max)


@dataclass(frozen=True)
class ServingRecipe:
    """B sequences of L_b tokens, the last n_b of them new queries, paged into blocks of block_size."""

    seq_lens: tuple[int, ...]
    query_lens: tuple[int, ...]
    block_size: int
    kv_heads: int
    group: int
    head_dim: int
    value_dim: int
    dtype: torch.dtype
    seed: int
    spare_blocks: int = 2
    pad_columns: int = 2
    shared_prefix: int = 0  # tokens every sequence shares with sequence 0 (prefix caching)
    index_dtype: torch.dtype = torch.int32
    magnitude: float = 1.0
    contiguous: bool = False  # one run of blocks per sequence, in order, nothing spare or padded
    softmax_scale: float | None = None  # ATTN-SCALE: the scale passed; None: 1/sqrt(Dqk)
    cache_layout: str = "separate"  # CACHE_LAYOUTS
    q_layout: str = "separate"  # Q_LAYOUTS
    metadata_layout: str = "contiguous"  # METADATA_LAYOUTS
    # MODEL-RUN: the window of the model's layer kind drawn (a profile run only; "-": none drawn).
    model_window: int | None | str = field(default="-", repr=False, compare=False)

    @property
    def attention_scale(self) -> float:
        return self.head_dim**-0.5 if self.softmax_scale is None else self.softmax_scale

    @property
    def q_heads(self) -> int:
        return self.kv_heads * self.group

    @property
    def max_len(self) -> int:
        return max(self.seq_lens)

    def make(self, device) -> PagedBatch:
        """Draw the data, then page it (both seeded); tensors on ``device``."""
        keys, values, q = self._data()
        return PagedBatch(self, q, keys, values, *self._layout(keys, values), device=device)

    def _data(self):
        gen = torch.Generator().manual_seed(self.seed)

        def draw(*shape):
            values = torch.randn(*shape, generator=gen, dtype=torch.float64) * self.magnitude
            return values.to(self.dtype)

        keys = [draw(n, self.kv_heads, self.head_dim) for n in self.seq_lens]
        values = [draw(n, self.kv_heads, self.value_dim) for n in self.seq_lens]
        q = draw(sum(self.query_lens), self.q_heads, self.head_dim)  # last: the caches do not depend on it
        for b in range(1, len(keys)):  # a shared prefix holds the same tokens in every sequence
            keys[b][: self.shared_prefix] = keys[0][: self.shared_prefix]
            values[b][: self.shared_prefix] = values[0][: self.shared_prefix]
        return keys, values, q

    def _layout(self, keys, values):
        """(k_cache, v_cache, block_table, block ids per sequence) on the CPU."""
        bs = self.block_size
        gen = torch.Generator().manual_seed(self.seed + 1)
        needed = [-(-n // bs) for n in self.seq_lens]
        shared = 0 if self.contiguous else self.shared_prefix // bs
        used = needed[0] + sum(n - shared for n in needed[1:])
        pool = used + (0 if self.contiguous else self.spare_blocks)
        order = list(range(pool)) if self.contiguous else torch.randperm(pool, generator=gen).tolist()
        ids, cursor = [], 0
        for b, n in enumerate(needed):
            own = n if b == 0 else n - shared
            ids.append(tuple((ids[0][:shared] if b else ()) + tuple(order[cursor : cursor + own])))
            cursor += own
        # Unread slots hold foreign data (random), so a backend that reads them is already wrong.
        k_cache = torch.randn(pool, bs, self.kv_heads, self.head_dim, generator=gen).to(self.dtype)
        v_cache = torch.randn(pool, bs, self.kv_heads, self.value_dim, generator=gen).to(self.dtype)
        for row, k, v in zip(ids, keys, values, strict=True):
            blocks, slots = _slots(row, 0, k.shape[0], bs)
            k_cache[blocks, slots], v_cache[blocks, slots] = k, v
        width = max(needed) + (0 if self.contiguous else self.pad_columns)
        garbage = torch.tensor([-1, pool, *range(pool)])  # padding, an id out of range, any block
        table = garbage[torch.randint(len(garbage), (len(ids), width), generator=gen)]
        for b, row in enumerate(ids):
            table[b, : len(row)] = torch.tensor(row)
        return k_cache, v_cache, table.to(self.index_dtype), tuple(ids)


def _slots(row, start: int, stop: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(block ids, slots) of positions start .. stop - 1 of a sequence whose blocks are ``row``."""
    positions = torch.arange(start, stop)
    return torch.tensor(row, dtype=torch.long)[positions // block_size], positions % block_size


def cache_views(
    k_cache: torch.Tensor, v_cache: torch.Tensor, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """SERVE-LAYOUT: the same caches as the views a framework hands over (CACHE_LAYOUTS)."""
    if layout == "kv-fused":
        if k_cache.shape == v_cache.shape:
            buffer = torch.stack([k_cache, v_cache], dim=1)  # [num_blocks, 2, block_size, Hkv, D]
            return buffer[:, 0], buffer[:, 1]
        buffer = torch.cat([k_cache, v_cache], dim=-1)
        return buffer[..., : k_cache.shape[-1]], buffer[..., k_cache.shape[-1] :]
    if layout == "hnd":
        return tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k_cache, v_cache))
    return k_cache, v_cache


def q_view(q: torch.Tensor, layout: str, kv_columns: int, seed: int) -> torch.Tensor:
    """SERVE-LAYOUT: q [T, Hq, Dqk] as the first columns of a fused qkv projection [T, Hq Dqk +
    kv_columns] (the k and v columns hold other values, from ``seed``), or q itself."""
    if layout != "fused-qkv":
        return q
    tokens, heads, dim = q.shape
    others = torch.randn(tokens, kv_columns, generator=torch.Generator().manual_seed(seed))
    qkv = torch.cat([q.reshape(tokens, -1), others.to(q.dtype).to(q.device)], dim=1)
    return qkv[:, : heads * dim].view(tokens, heads, dim)


class PagedBatch:
    """The tensors of one paged_attention call, and the dense data they were paged from."""

    def __init__(self, recipe, q, keys, values, k_cache, v_cache, block_table, ids, *, device):
        self.recipe, self.ids, self.device = recipe, ids, device
        self.keys, self.values = keys, values  # CPU, per sequence [L_b, Hkv, D*]
        kv_columns = recipe.kv_heads * (recipe.head_dim + recipe.value_dim)
        self.q = q_view(q.contiguous().to(device), recipe.q_layout, kv_columns, recipe.seed + 2)
        self.k_cache, self.v_cache = cache_views(k_cache.to(device), v_cache.to(device), recipe.cache_layout)
        starts = [0, *itertools.accumulate(recipe.query_lens)]
        self.block_table = block_table.to(device)
        self.cu_seqlens_q = torch.tensor(starts, dtype=recipe.index_dtype, device=device)
        self.seq_lens = torch.tensor(recipe.seq_lens, dtype=recipe.index_dtype, device=device)
        if recipe.metadata_layout != "contiguous":  # made on the device: a moved view is contiguous
            self.block_table = row_strided_view(self.block_table)
        if recipe.metadata_layout == METADATA_VIEWS:
            self.cu_seqlens_q, self.seq_lens = strided_view(self.cu_seqlens_q), strided_view(self.seq_lens)

    def args(self) -> tuple[tuple, dict]:
        """(q, k_cache, v_cache) and the metadata keywords of paged_attention."""
        meta = {"block_table": self.block_table, "cu_seqlens_q": self.cu_seqlens_q, "seq_lens": self.seq_lens}
        return (self.q, self.k_cache, self.v_cache), meta

    def cpu(self) -> PagedBatch:
        """The same batch on the CPU (for the oracle)."""
        return self.with_caches(self.k_cache, self.v_cache, device="cpu")

    def with_caches(self, k_cache, v_cache, *, device=None) -> PagedBatch:
        copy = PagedBatch(
            self.recipe, self.q.cpu(), self.keys, self.values, k_cache.cpu(), v_cache.cpu(),
            self.block_table.cpu(), self.ids, device=self.device if device is None else device,
        )  # fmt: skip
        return copy

    def first_visible(self, b: int, window: int | None) -> int:
        """SERVE-EVICT's e_b: the first position a query of sequence b may see."""
        first_query = self.recipe.seq_lens[b] - self.recipe.query_lens[b]
        return 0 if window is None else max(0, first_query - window + 1)

    def readable(self, *, evict_window=None, stops=None) -> torch.Tensor:
        """bool [num_blocks, block_size]: the slots some sequence may read (positions e_b .. stop_b - 1;
        e_b = 0 without ``evict_window``, stop_b = L_b unless ``stops`` says otherwise)."""
        bs = self.recipe.block_size
        mask = torch.zeros(self.k_cache.shape[0], bs, dtype=torch.bool)
        for b, row in enumerate(self.ids):
            stop = self.recipe.seq_lens[b] if stops is None else stops[b]
            mask[_slots(row, self.first_visible(b, evict_window), stop, bs)] = True
        return mask

    def poison(self, value: float, **which) -> PagedBatch:
        """Every slot no sequence may read (``readable(**which)``) set to ``value`` (NaN or huge)."""
        unread = ~self.readable(**which).to(self.k_cache.device)[:, :, None, None]
        k_cache, v_cache = (t.masked_fill(unread, value) for t in (self.k_cache, self.v_cache))
        return self.with_caches(k_cache, v_cache)

    def row_slices(self) -> list[slice]:
        """Sequence b's rows of q and of the output."""
        starts = self.cu_seqlens_q.tolist()
        return [slice(a, b) for a, b in zip(starts, starts[1:], strict=False)]


def _sequence(draw, kind: str, block_size: int, query_budget: int, long: bool) -> tuple[int, int]:
    """(L_b, n_b) of one sequence: decode n = 1, prefill n = L, extend 1 < n < L; ``long``: a decode or
    extend of LONG_LEN keys (SERVE-LONG)."""
    max_len = min(MAX_LEN, 40 * block_size)  # at most 40 blocks per sequence
    if long and kind != "prefill":
        length = draw(st.one_of(st.integers(*LONG_LEN), st.sampled_from(PARTITION_EDGES)))
        few = st.integers(2, min(LONG_QUERIES, query_budget))
        return length, 1 if kind == "decode" else draw(st.one_of(few, st.integers(*MANY_QUERIES)))
    if kind == "decode":
        length = draw(st.one_of(st.integers(1, 4), st.integers(1, max_len)))
        return length, 1
    if kind == "prefill":
        length = draw(st.integers(1, min(max_len, query_budget)))
        return length, length
    length = draw(st.integers(3, max_len))
    return length, draw(st.integers(2, min(length - 1, query_budget)))


@st.composite
def serving_recipes(
    draw, *, kinds=KINDS, layout=None, batch=None, dtypes=FLOAT_DTYPES, dims=SAME_DIMS, magnitudes=(1.0,),
    long=(False,), max_scale_ratio: float = 2.0, cache_layouts=CACHE_LAYOUTS,
    q_layouts=Q_LAYOUTS, metadata_layouts=METADATA_LAYOUTS,
) -> ServingRecipe:  # fmt: skip
    """A ragged paged batch: B 1..3 sequences of the given kinds (``layout``: exactly these kinds),
    the softmax scale (ATTN-SCALE) and the cache and q layouts (SERVE-LAYOUT) drawn too.

    ``long`` is sampled (its first entry is the simplest): a long draw gives every decode and extend
    sequence LONG_LEN keys, with 1-2 kv heads of 4-8 dims (SERVE-LONG; ``SOME_LONG``: 1 in 8)."""
    if layout is None:
        size = batch or draw(st.integers(1, 3))
        layout = [draw(st.sampled_from(kinds)) for _ in range(size)]
    is_long = draw(st.sampled_from(long)) and any(kind != "prefill" for kind in layout)
    block_size = draw(st.sampled_from(LONG_BLOCK_SIZES if is_long else BLOCK_SIZES))
    budget = MAX_TOKENS // len(layout)
    lengths, query_lens = zip(
        *(_sequence(draw, kind, block_size, budget, is_long) for kind in layout), strict=True
    )
    shareable = min(lengths) // block_size if len(layout) > 1 else 0
    if is_long:
        dims = LONG_MIXED_DIMS if all(dqk != dv for dqk, dv in dims) else LONG_DIMS
    big, small = [d for d in dims if d in MODEL_DIMS], [d for d in dims if d not in MODEL_DIMS]
    if any(dq != dv for dq, dv in big):  # SERVE-HEAD-DIMS: MLA's dims in half the examples
        dims = draw(st.sampled_from((small, big)))
    head_dim, value_dim = draw(st.sampled_from(dims))
    kv_heads, group, scale, window = None, None, None, "-"
    layer_kinds = pinned_values("attention.layer")
    if layer_kinds and not is_long:  # MODEL-RUN: one of the model's layer kinds (long draws stay small)
        # Dv != Dqk kinds only for a property drawing such dims (SERVE-HEAD-DIMS), Dv = Dqk ones likewise.
        fitting = [k for k in layer_kinds if dims_fit(k[2], k[3], dims)]
        if fitting:
            kv_heads, group, head_dim, value_dim, scale, window = draw(st.sampled_from(fitting))
    return ServingRecipe(
        seq_lens=tuple(lengths),
        query_lens=tuple(query_lens),
        block_size=block_size,
        kv_heads=kv_heads or draw(st.integers(1, 2)),
        group=group or draw(st.sampled_from((1, 2, 3) if is_long else (1, 2, 3, 4))),
        head_dim=head_dim,
        value_dim=value_dim,
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds()),
        spare_blocks=draw(st.integers(0, 4)),
        pad_columns=draw(st.integers(0, 3)),
        shared_prefix=draw(st.integers(0, shareable)) * block_size,
        index_dtype=draw(st.sampled_from((torch.int32, torch.int64))),
        magnitude=draw(st.sampled_from(magnitudes)),
        softmax_scale=scale or draw(softmax_scales(head_dim, max_ratio=max_scale_ratio)),
        cache_layout=draw(st.sampled_from(cache_layouts)),
        q_layout=draw(st.sampled_from(q_layouts)),
        metadata_layout=draw(st.sampled_from(metadata_layouts)),  # drawn last: earlier draws unchanged
        model_window=window,
    )


def partition_edge_recipe(length: int) -> ServingRecipe:
    """SERVE-LONG at a partition boundary (spec/serving.md, Ranges): a decode and a 3-query extend of
    ``length`` keys in 16-key pages, 1 kv head of 3 queries (an odd group), head dim 8, float32."""
    return ServingRecipe(seq_lens=(length, length), query_lens=(1, 3), block_size=16, kv_heads=1, group=3,
                         head_dim=8, value_dim=8, dtype=torch.float32, seed=length)  # fmt: skip


def windows(recipe: ServingRecipe, *, optional: bool = True):
    """A window W, often below the longest sequence (one key more or less then matters); or None.
    In a profile run (MODEL-RUN) the model's window of the recipe's layer kind, or of any kind."""
    if recipe.model_window != "-" and (optional or recipe.model_window is not None):
        return st.just(recipe.model_window)
    if pinned_values("attention.window", present=not optional):
        return pinned("attention.window", None, present=not optional)
    inside = st.integers(1, max(1, recipe.max_len - 1))
    drawn = st.one_of(inside, st.integers(1, recipe.max_len + 2))
    return st.one_of(st.none(), drawn) if optional else drawn


def contiguous(recipe: ServingRecipe) -> ServingRecipe:
    """The same sequences, one run of blocks each as large as the longest sequence (SERVE-PAGED)."""
    return dataclasses.replace(recipe, block_size=recipe.max_len, contiguous=True)


def extend_rows(recipe: ServingRecipe, extra: int) -> ServingRecipe:
    """The same caches with up to ``extra`` more query rows before each sequence's last one."""
    lens = tuple(min(length, 1 + extra) for length in recipe.seq_lens)
    return dataclasses.replace(recipe, query_lens=lens)


def sink_values():
    """Sink logits that matter: moderate ones and very large ones (the sink takes nearly all the mass)."""
    return st.one_of(st.floats(-2.0, 4.0), st.sampled_from((-30.0, 10.0, 20.0)))

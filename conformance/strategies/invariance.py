"""Draws for spec/invariance.md: values with an exponent spread, batches of two compositions, and
paged-attention calls built from sequences (INV-VACUITY's guards are in how these are drawn)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies.common import seeds

# INV-ROW (spec/invariance.md, Ranges): the large side's batch sizes, straddling vLLM's RMSNorm
# block-size switch at 256 tokens and the MoE dispatch tiles; the small side holds 2 to 7 rows.
LARGE_BATCHES = (8, 16, 64, 255, 256, 257, 300)
SMALL_MAX = 7
# INV-VACUITY: values m * 2^e, m in [1, 2), e over 12 binades: a float32 sum in another order then
# rounds differently on most rows (tests/test_invariance_guards.py measures it).
EXPONENTS = (-6, 6)
ROW_DTYPES = (torch.float32, torch.float32, torch.bfloat16)  # float32 shows the bits best


def spread(gen: torch.Generator, *shape, dtype=torch.float32) -> torch.Tensor:
    """Random values with an exponent spread (INV-VACUITY), both signs."""
    mantissa = 1 + torch.rand(shape, generator=gen, dtype=torch.float64)
    exponent = torch.randint(EXPONENTS[0], EXPONENTS[1] + 1, shape, generator=gen).double()
    sign = torch.randint(0, 2, shape, generator=gen).double() * 2 - 1
    return (sign * mantissa * torch.exp2(exponent)).to(dtype)


@dataclass(frozen=True)
class RowBatches:
    """A large batch of ``large`` rows and a small one of ``small`` rows holding rows ``picked`` of the
    large one (in that order) at the positions ``small_positions``, other rows elsewhere (INV-ROW)."""

    large: int
    picked: tuple[int, ...]
    small_positions: tuple[int, ...]
    small: int
    seed: int


@st.composite
def row_batches(draw, *, large=LARGE_BATCHES) -> RowBatches:
    """INV-VACUITY: at least two compared rows, some away from position 0, at other positions in a
    batch of another size."""
    rows = draw(st.sampled_from(large), label="large_batch")
    small = draw(st.integers(2, SMALL_MAX), label="small_batch")
    count = draw(st.integers(2, small), label="compared_rows")
    picked = draw(
        st.lists(st.integers(0, rows - 1), min_size=count, max_size=count, unique=True), label="picked"
    )
    positions = draw(st.permutations(range(small)), label="small_order")[:count]
    return RowBatches(rows, tuple(picked), tuple(positions), small, draw(seeds()))


# --- paged attention -------------------------------------------------------------------------


@dataclass(frozen=True)
class Seq:
    """One sequence's keys, values and a query for every position (float32, exponent spread)."""

    keys: torch.Tensor  # [L, Hkv, D]
    values: torch.Tensor  # [L, Hkv, D]
    queries: torch.Tensor  # [L, Hq, D]

    @property
    def length(self) -> int:
        return self.keys.shape[0]


def make_seq(gen, length: int, *, q_heads: int, kv_heads: int, dim: int, dtype) -> Seq:
    # Keys and queries at a small spread (scores stay in exp's range), values at the full one.
    small = lambda *s: (spread(gen, *s) / 32).to(dtype)  # noqa: E731 - a local shorthand
    return Seq(small(length, kv_heads, dim), spread(gen, length, kv_heads, dim, dtype=dtype),
               small(length, q_heads, dim))  # fmt: skip


@dataclass(frozen=True)
class Item:
    """One sequence of a call: ``seq``'s first ``length`` positions are cached, the last ``n`` are
    queried; ``share`` (index of an earlier item, blocks) reads its first blocks from that item's."""

    seq: Seq | None  # None: a padding sequence (one query of zeros, seq_len 1, a zeroed block)
    length: int = 1
    n: int = 1
    share: tuple[int, int] | None = None


@dataclass
class Call:
    """paged_attention's arguments for ``items`` and where each item's rows are in q."""

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    kwargs: dict
    rows: list[slice]
    slots: list[list[int]]  # per item, the cache slot of each position

    def run(self, backend, device, **options):
        """The backend's output for fresh copies of the arguments on ``device``."""
        args = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.kwargs.items()}
        q, kc, vc = (t.clone().to(device) for t in (self.q, self.k_cache, self.v_cache))
        return backend.paged_attention(q, kc, vc, **args, **options)


def build_call(items: list[Item], *, block_size: int, gen: torch.Generator, window=None) -> Call:
    """A paged call: each item's blocks at shuffled physical ids (a shared prefix reuses the earlier
    item's), padding items on one zeroed block, unread table entries 0."""
    real = [it for it in items if it.seq is not None]
    sample = real[0].seq
    kv_heads, dim, dtype = sample.keys.shape[1], sample.keys.shape[2], sample.keys.dtype
    need = [math.ceil(it.length / block_size) for it in items]
    order = torch.randperm(sum(need) + 1, generator=gen).tolist()
    zero_block, order = order[0], order[1:]
    k_cache = torch.zeros(len(order) + 1, block_size, kv_heads, dim, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    tables, slots, qs, rows, start = [], [], [], [], 0
    for it, count in zip(items, need, strict=True):
        if it.seq is None:
            table = [zero_block]
            qs.append(torch.zeros(1, sample.queries.shape[1], dim, dtype=dtype))
        else:
            table = [order.pop() for _ in range(count)]
            if it.share is not None:
                owner, shared = it.share
                table[:shared] = tables[owner][:shared]
            qs.append(it.seq.queries[it.length - it.n : it.length])
        pos = [table[p // block_size] * block_size + p % block_size for p in range(it.length)]
        if it.seq is not None:
            k_cache.view(-1, kv_heads, dim)[pos] = it.seq.keys[: it.length]
            v_cache.view(-1, kv_heads, dim)[pos] = it.seq.values[: it.length]
        tables.append(table)
        slots.append(pos)
        rows.append(slice(start, start + it.n))
        start += it.n
    width = max(len(t) for t in tables)
    block_table = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    cu = torch.tensor([0] + [r.stop for r in rows], dtype=torch.int32)
    seq_lens = torch.tensor([it.length for it in items], dtype=torch.int32)
    kwargs = dict(block_table=block_table, cu_seqlens_q=cu, seq_lens=seq_lens, sliding_window=window,
                  softcap=None, sinks=None, scale=dim**-0.5)  # fmt: skip
    return Call(torch.cat(qs), k_cache, v_cache, kwargs, rows, slots)


@st.composite
def attention_shapes(draw) -> dict:
    """Heads, head dim, dtype, page size and the generator of one property's sequences."""
    kv_heads = draw(st.sampled_from((1, 2)), label="kv_heads")
    return dict(kv_heads=kv_heads, q_heads=kv_heads * draw(st.sampled_from((1, 2)), label="group"),
                dim=draw(st.sampled_from((4, 8)), label="head_dim"),
                dtype=draw(st.sampled_from((torch.float32, torch.float32, torch.bfloat16)), label="dtype"),
                seed=draw(seeds()))  # fmt: skip


def page_sizes(split: int):
    """Page sizes that divide the split size (a prefix of whole splits is whole pages: INV-PREFIX)."""
    return st.sampled_from([b for b in (1, 2, 4, 8, 16) if split % b == 0] or [1])

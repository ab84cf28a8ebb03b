"""Conformance properties for spec/invariance.md, paged attention: DET-RUN, INV-SEQ, INV-SPLIT,
INV-PREFILL-DECODE, INV-CHUNK, INV-PREFIX.

Every call is built from sequences (conformance/strategies/invariance.py: ``Item``, ``build_call``);
each property runs its first side twice (DET-RUN, first), refuses uninformative outputs and compares
bitwise with the proof that its sides ran differently (INV-VACUITY). The split-size clauses are
gated on ``kv_split_size`` (conformance/promises.py) and draw around the size declared.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from backends import not_implemented_reason
from conformance import promises
from conformance.checks import describe
from conformance.harness import profiles
from conformance.invariance_checks import Side, check_bitwise, check_informative, check_repeat
from conformance.strategies.invariance import Item, attention_shapes, build_call, make_seq, page_sizes

EXAMPLES = profiles.share_of_examples(1 / 5)
OP = "paged_attention"


def _rows(call, out, items) -> torch.Tensor:
    """The output rows of ``items`` (indices into the call's items), in that order."""
    return torch.cat([out[call.rows[i]] for i in items])


def _positions(call, items) -> tuple[int, ...]:
    return tuple(r for i in items for r in range(call.rows[i].start, call.rows[i].stop))


def _first_side(backend, device, call, side: Side, context: str) -> torch.Tensor:
    """DET-RUN first (the call twice), then INV-VACUITY on its output; the output on the cpu."""
    (out,) = check_repeat(lambda: call.run(backend, device), context=context, side=side)
    check_informative(out.float().reshape(out.shape[0], -1), context=context)
    return out.cpu()


def _split(backend) -> int:
    return promises.split_size(backend) or 8


@st.composite
def _sequence_kinds(draw, count: int, longest: int) -> list[tuple[int, int]]:
    """(length, queries) of ``count`` neighbours: decoding, prefilling or extending."""
    out = []
    for _ in range(count):
        length = draw(st.integers(1, longest))
        kind = draw(st.sampled_from(("decode", "prefill", "extend")))
        out.append(
            (length, 1 if kind == "decode" else length if kind == "prefill" else draw(st.integers(1, length)))
        )
    return out


@pytest.mark.clause("DET-RUN", "INV-VACUITY")
@pytest.mark.op(OP)
@pytest.mark.promise("deterministic")
@EXAMPLES
@given(shapes=attention_shapes(), data=st.data())
def test_attention_gives_the_same_bits_each_run(backend, device, shapes, data):
    """DET-RUN: a ragged batch (decode-only or mixed, so both of an adapter's kernels run), twice."""
    gen = torch.Generator().manual_seed(shapes.pop("seed"))
    decode_only = data.draw(st.booleans(), label="decode_only")
    kinds = data.draw(_sequence_kinds(data.draw(st.integers(2, 5), label="sequences"), 24), label="kinds")
    items = [Item(make_seq(gen, length, **shapes), length, 1 if decode_only else n) for length, n in kinds]
    call = build_call(items, block_size=data.draw(st.sampled_from((4, 16)), label="page_size"), gen=gen)
    side = Side(f"batch of {len(items)} sequences", _positions(call, range(len(items))))
    _first_side(backend, device, call, side, describe(backend, device, OP, decode_only=decode_only, **shapes))


@pytest.mark.clause("INV-SEQ", "DET-RUN", "INV-VACUITY")
@pytest.mark.op(OP)
@pytest.mark.promise("batch_invariant")
@EXAMPLES
@given(shapes=attention_shapes(), data=st.data())
def test_a_sequence_alone_equals_its_rows_in_a_ragged_batch(backend, device, shapes, data):
    """INV-SEQ: a sequence of 2+ query rows, alone, equals its rows among prefilling, extending and
    decoding neighbours before and after it and padding sequences at the end."""
    gen = torch.Generator().manual_seed(shapes.pop("seed"))
    length = data.draw(st.integers(2, 24), label="length")
    target = Item(make_seq(gen, length, **shapes), length, data.draw(st.integers(2, length), label="queries"))
    before = data.draw(_sequence_kinds(data.draw(st.integers(0, 3)), 24), label="before")
    after = data.draw(_sequence_kinds(data.draw(st.integers(0 if before else 1, 3)), 24), label="after")
    padding = data.draw(st.integers(0, 3), label="padding")
    window = data.draw(st.sampled_from((None, None, 5)), label="sliding_window")
    block_size = data.draw(st.sampled_from((4, 16)), label="page_size")
    alone = build_call([target], block_size=block_size, gen=gen, window=window)
    neighbours = [Item(make_seq(gen, ln, **shapes), ln, n) for ln, n in before + after]
    items = neighbours[: len(before)] + [target] + neighbours[len(before) :] + [Item(None)] * padding
    batch = build_call(items, block_size=block_size, gen=gen, window=window)
    context = describe(backend, device, OP, sliding_window=window, page_size=block_size, **shapes)
    what = f"ragged batch of {len(items)} sequences ({padding} padding)"
    sides = (Side(what, _positions(batch, [len(before)])), Side("the sequence alone", _positions(alone, [0])))
    want = _first_side(backend, device, alone, sides[1], context)
    got = batch.run(backend, device).cpu()
    check_bitwise(_rows(batch, got, [len(before)]), want, clause="INV-SEQ", context=context, sides=sides)


@pytest.mark.clause("INV-SPLIT", "DET-RUN", "INV-VACUITY")
@pytest.mark.op(OP)
@pytest.mark.promise("kv_split_size")
@EXAMPLES
@given(shapes=attention_shapes(), data=st.data())
def test_decode_rows_do_not_depend_on_the_number_of_splits(backend, device, shapes, data):
    """INV-SPLIT: 2-3 decoding sequences (lengths around the split size) give the same bits in a decode
    batch of 4-12, with and without a window."""
    gen, n = torch.Generator().manual_seed(shapes.pop("seed")), _split(backend)
    lengths = st.sampled_from((max(1, n - 1), n, n + 1, 2 * n + 1))
    total = data.draw(st.integers(4, 12), label="batch")
    seqs = [
        make_seq(gen, length, **shapes)
        for length in data.draw(st.lists(lengths, min_size=total, max_size=total))
    ]
    few = data.draw(st.integers(2, 3), label="compared")
    window = data.draw(st.sampled_from((None, 3, 2 * n)), label="sliding_window")
    block_size = data.draw(page_sizes(n), label="page_size")
    small = build_call([Item(s, s.length) for s in seqs[:few]], block_size=block_size, gen=gen, window=window)
    order = data.draw(st.permutations(range(total)), label="order")
    large = build_call(
        [Item(seqs[i], seqs[i].length) for i in order], block_size=block_size, gen=gen, window=window
    )
    where = [order.index(i) for i in range(few)]
    context = describe(backend, device, OP, kv_split_size=n, sliding_window=window, **shapes)
    sides = (Side(f"decode batch of {total}", _positions(large, where)),
             Side(f"decode batch of {few}", _positions(small, range(few))))  # fmt: skip
    want = _first_side(backend, device, small, sides[1], context)
    got = large.run(backend, device).cpu()
    check_bitwise(_rows(large, got, where), want, clause="INV-SPLIT", context=context, sides=sides)


@pytest.mark.clause("INV-PREFILL-DECODE", "DET-RUN", "INV-VACUITY")
@pytest.mark.op(OP)
@pytest.mark.promise("kv_split_size")
@EXAMPLES
@given(shapes=attention_shapes(), data=st.data())
def test_prefill_row_t_equals_decoding_token_t(backend, device, shapes, data):
    """INV-PREFILL-DECODE: one prefill call of L tokens; row t equals the decode of token t
    (seq_len t + 1) in a decode batch sharing the prefill's pages: the last token, the tokens at the
    first split boundaries and up to 8 others (all of them for short sequences)."""
    gen, n = torch.Generator().manual_seed(shapes.pop("seed")), _split(backend)
    length = data.draw(st.integers(2, 3 * n + 3), label="length")
    seq, block_size = make_seq(gen, length, **shapes), data.draw(page_sizes(n), label="page_size")
    window = data.draw(st.sampled_from((None, None, n + 1)), label="sliding_window")
    prefill = build_call([Item(seq, length, length)], block_size=block_size, gen=gen, window=window)
    boundary = [t for t in (n - 1, n, 2 * n - 1, 2 * n) if t < length - 1]
    others = data.draw(
        st.lists(st.integers(0, length - 2), min_size=1, max_size=8, unique=True), label="tokens"
    )
    tokens = sorted(set(boundary + others))
    decodes = [Item(seq, t + 1, 1, share=(0, -(-(t + 1) // block_size))) for t in tokens]
    decode = build_call([Item(seq, length, 1)] + decodes, block_size=block_size, gen=gen, window=window)
    context = describe(backend, device, OP, kv_split_size=n, length=length, sliding_window=window, **shapes)
    # decode's item 0 is token L - 1 (owning the pages); items 1.. are ``tokens``.
    order, tokens = list(range(1, len(tokens) + 1)) + [0], tokens + [length - 1]
    sides = (Side(f"decode batch of {len(tokens)} tokens", _positions(decode, order)),
             Side(f"prefill of {length} tokens", tuple(tokens)))  # fmt: skip
    want = _first_side(backend, device, prefill, sides[1], context)[tokens]
    got = decode.run(backend, device).cpu()
    check_bitwise(_rows(decode, got, order), want, clause="INV-PREFILL-DECODE", context=context, sides=sides)


def _boundaries(data, length: int, n: int) -> list[int]:
    multiples = list(range(n, length, n))
    chosen = data.draw(
        st.lists(st.sampled_from(multiples), min_size=1, max_size=2, unique=True), label="chunks"
    )
    return sorted(chosen) + [length]


@pytest.mark.clause("INV-CHUNK", "DET-RUN", "INV-VACUITY")
@pytest.mark.op(OP)
@pytest.mark.promise("kv_split_size")
@EXAMPLES
@given(shapes=attention_shapes(), data=st.data())
def test_chunked_prefill_equals_one_pass(backend, device, shapes, data):
    """INV-CHUNK: a prefill in chunks ending at multiples of the split size (each an extend call on the
    cache written so far, through the backend's write_kv_cache when it has one) equals one prefill
    call, rows and cache."""
    gen, n = torch.Generator().manual_seed(shapes.pop("seed")), _split(backend)
    length = data.draw(st.integers(n + 1, 3 * n + 3), label="length")
    seq, block_size = make_seq(gen, length, **shapes), data.draw(page_sizes(n), label="page_size")
    window = data.draw(st.sampled_from((None, None, n + 1)), label="sliding_window")
    whole = build_call([Item(seq, length, length)], block_size=block_size, gen=gen, window=window)
    stops = _boundaries(data, length, n)
    context = describe(backend, device, OP, kv_split_size=n, length=length, chunks=stops, **shapes)
    sides = (Side(f"prefill in chunks ending at {stops}", tuple(range(length))),
             Side(f"one prefill of {length} tokens", tuple(range(length))))  # fmt: skip
    want = _first_side(backend, device, whole, sides[1], context)
    writes = not_implemented_reason(backend, "write_kv_cache") is None
    k_cache, v_cache = (torch.zeros_like(c).to(device) for c in (whole.k_cache, whole.v_cache))
    if not writes:
        k_cache, v_cache = whole.k_cache.clone().to(device), whole.v_cache.clone().to(device)
    rows, start = [], 0
    for stop in stops:
        slots = torch.tensor(whole.slots[0][start:stop], device=device)
        if writes:
            backend.write_kv_cache(seq.keys[start:stop].to(device), seq.values[start:stop].to(device),
                                   k_cache, v_cache, slots)  # fmt: skip
        args = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in whole.kwargs.items()}
        args.update(cu_seqlens_q=torch.tensor([0, stop - start], dtype=torch.int32, device=device),
                    seq_lens=torch.tensor([stop], dtype=torch.int32, device=device))  # fmt: skip
        rows.append(
            backend.paged_attention(seq.queries[start:stop].to(device), k_cache, v_cache, **args).cpu()
        )
        start = stop
    check_bitwise(torch.cat(rows), want, clause="INV-CHUNK", context=context, sides=sides)
    for name, got, wrote in (("k_cache", k_cache, whole.k_cache), ("v_cache", v_cache, whole.v_cache)):
        check_bitwise(got.cpu(), wrote, clause="INV-CHUNK", context=f"{context}: {name}", sides=sides)


@pytest.mark.clause("INV-PREFIX", "DET-RUN", "INV-VACUITY")
@pytest.mark.op(OP)
@pytest.mark.promise("kv_split_size")
@EXAMPLES
@given(shapes=attention_shapes(), data=st.data())
def test_a_cached_prefix_equals_a_cold_prefill(backend, device, shapes, data):
    """INV-PREFIX: the new tokens of a sequence whose first P tokens (a multiple of the split size) are
    read from another sequence's shared pages equal the same rows of a cold prefill."""
    gen, n = torch.Generator().manual_seed(shapes.pop("seed")), _split(backend)
    length = data.draw(st.integers(n + 2, 3 * n + 3), label="length")
    prefix = data.draw(st.sampled_from(range(n, length - 1, n)), label="prefix")  # 2+ new rows
    seq, block_size = make_seq(gen, length, **shapes), data.draw(page_sizes(n), label="page_size")
    window = data.draw(st.sampled_from((None, None, n + 1)), label="sliding_window")
    cold = build_call([Item(seq, length, length)], block_size=block_size, gen=gen, window=window)
    # The owner: the same prefix, then other tokens; it decodes its last token in the same batch.
    other = make_seq(gen, length, **shapes)
    parts = zip((seq.keys, seq.values, seq.queries), (other.keys, other.values, other.queries), strict=True)
    owner = type(seq)(*(torch.cat([a[:prefix], b[prefix:]]) for a, b in parts))
    hit = Item(seq, length, length - prefix, share=(0, prefix // block_size))
    warm = build_call([Item(owner, length, 1), hit], block_size=block_size, gen=gen, window=window)
    context = describe(backend, device, OP, kv_split_size=n, length=length, prefix=prefix, **shapes)
    sides = (Side(f"extend of {length - prefix} after a cached prefix of {prefix}", _positions(warm, [1])),
             Side(f"cold prefill of {length}", tuple(range(prefix, length))))  # fmt: skip
    want = _first_side(backend, device, cold, sides[1], context)[prefix:]
    got = warm.run(backend, device).cpu()
    check_bitwise(_rows(warm, got, [1]), want, clause="INV-PREFIX", context=context, sides=sides)

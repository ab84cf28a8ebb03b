"""The serving oracle (spec/serving.md) against a per-element brute force, the dense attention
oracles on their special cases, and (with transformers) Gemma2's and gpt-oss's eager attention."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from reference import attention, masks, serving


def brute_force(q, k_cache, v_cache, table, cu_seqlens_q, seq_lens, window, softcap, sinks, scale):
    """SERVE written from the spec text alone: per token, head and position, in Python floats.

    SERVE-NAN as stated: only visible slots are read; a NaN score or sink makes the row NaN, a NaN
    value reaches its column through weight * x."""
    block_size, group = k_cache.shape[1], q.shape[1] // k_cache.shape[2]
    qs, ks, vs = q.double().tolist(), k_cache.double().tolist(), v_cache.double().tolist()
    table, starts, lengths = table.tolist(), cu_seqlens_q.tolist(), seq_lens.tolist()
    out = [[[0.0] * v_cache.shape[3] for _ in range(q.shape[1])] for _ in range(q.shape[0])]
    for b, length in enumerate(lengths):
        n = starts[b + 1] - starts[b]
        for r in range(n):
            t, p = starts[b] + r, length - n + r  # bottom-right: the last n positions are the queries
            for h in range(q.shape[1]):
                keys, scores = [], []
                for j in range(length):
                    if j > p or (window is not None and p - j >= window):
                        continue
                    slot = (table[b][j // block_size], j % block_size)
                    key = ks[slot[0]][slot[1]][h // group]
                    s = scale * sum(a * c for a, c in zip(qs[t][h], key, strict=True))
                    keys.append(slot)
                    scores.append(s if softcap is None else softcap * math.tanh(s / softcap))
                extra = [] if sinks is None else [float(sinks[h])]
                if any(math.isnan(s) for s in scores + extra):  # SERVE-NAN: a NaN logit it sees
                    out[t][h] = [float("nan")] * v_cache.shape[3]
                    continue
                top = max(scores + extra)
                denominator = sum(math.exp(s - top) for s in scores + extra)
                for s, (blk, slot) in zip(scores, keys, strict=True):
                    weight = math.exp(s - top) / denominator
                    row = vs[blk][slot][h // group]
                    out[t][h] = [o + weight * x for o, x in zip(out[t][h], row, strict=True)]
    return torch.tensor(out, dtype=torch.float64)


def make_case(seqs, *, block_size, hq=4, hkv=2, dqk=6, dv=6, shared=0, spare=3, seed=0, index=torch.int64):
    """A paged batch: seqs = [(L_b, n_b)], blocks in a random order, ``shared`` prefix blocks of
    sequence 0 reused by sequence 1, ``spare`` unreferenced blocks, table padding of -1 and a foreign id."""
    gen = torch.Generator().manual_seed(seed)
    needed = [-(-length // block_size) for length, _ in seqs]
    own = sum(needed) - (shared if len(seqs) > 1 else 0)
    ids = torch.randperm(own + spare, generator=gen).tolist()
    width = max(needed) + 2
    table = torch.full((len(seqs), width), -1, dtype=torch.long)
    table[:, -1] = 10**6  # padding past ceil(L / block_size) is never read (SERVE)
    for b, count in enumerate(needed):
        reuse = shared if b == 1 else 0
        table[b, :reuse] = table[0, :reuse]
        table[b, reuse:count] = torch.tensor([ids.pop() for _ in range(count - reuse)], dtype=torch.long)
    total = sum(n for _, n in seqs)
    cu = torch.tensor([0] + [sum(n for _, n in seqs[: b + 1]) for b in range(len(seqs))], dtype=index)
    return dict(
        q=torch.randn(total, hq, dqk, generator=gen, dtype=torch.float64),
        k_cache=torch.randn(own + spare, block_size, hkv, dqk, generator=gen, dtype=torch.float64),
        v_cache=torch.randn(own + spare, block_size, hkv, dv, generator=gen, dtype=torch.float64),
        block_table=table.to(index),
        cu_seqlens_q=cu,
        seq_lens=torch.tensor([length for length, _ in seqs], dtype=index),
    )


GRID = {
    "ragged-bs1": dict(seqs=[(5, 5), (7, 1), (9, 3)], block_size=1),
    "bs3-window1": dict(seqs=[(8, 8), (6, 2)], block_size=3, window=1),
    "bs16-window4-softcap": dict(seqs=[(11, 4), (20, 20), (3, 1)], block_size=16, window=4, softcap=1.5),
    "shared-prefix-sinks": dict(seqs=[(10, 2), (12, 5)], block_size=3, shared=3, sinks=(-1.0, 0.5, 2.0, 0.0)),
    "large-sinks-window": dict(seqs=[(9, 9), (7, 3)], block_size=2, window=3, sinks=(30.0, 25.0, 40.0, 28.0)),
    "gqa3-dv-int32": dict(seqs=[(6, 3), (13, 1)], block_size=4, hq=6, hkv=2, dqk=5, dv=3, index=torch.int32),
    "everything": dict(
        seqs=[(14, 6), (9, 1), (5, 5)],
        block_size=3,
        shared=2,
        window=5,
        softcap=2.0,
        hq=4,
        hkv=1,
        dv=7,
        sinks=(0.3, -2.0, 1.0, 3.0),
        index=torch.int32,
    ),  # fmt: skip
    "window-beyond-length": dict(seqs=[(4, 2), (6, 6)], block_size=5, window=50, softcap=0.7),
}


def run_case(spec, **overrides):
    """Build GRID case ``spec`` and return (arguments, oracle output)."""
    spec = dict(spec)
    options = {name: spec.pop(name, None) for name in ("window", "softcap", "sinks")}
    args = make_case(**spec)
    sinks = options["sinks"]
    call = dict(
        args, sliding_window=options["window"], softcap=options["softcap"], scale=0.45,
        sinks=None if sinks is None else torch.tensor(sinks, dtype=torch.float64),
    )  # fmt: skip
    call.update(overrides)
    return call, serving.paged_attention(**call)


def _brute(call):
    return brute_force(
        call["q"], call["k_cache"], call["v_cache"], call["block_table"], call["cu_seqlens_q"],
        call["seq_lens"], call["sliding_window"], call["softcap"], call["sinks"], call["scale"],
    )  # fmt: skip


@pytest.mark.parametrize("name", GRID)
def test_paged_attention_equals_brute_force(name):
    """SERVE (with SERVE-SOFTCAP, SERVE-SINKS, SERVE-HEAD-DIMS): the oracle is the per-element definition."""
    call, got = run_case(GRID[name])
    want = _brute(call)
    assert got.shape == want.shape == (call["q"].shape[0], call["q"].shape[1], call["v_cache"].shape[3])
    assert want.abs().max() > 0
    # Relative to the case's magnitude: large sinks shrink every output towards 0 (SERVE-SINKS).
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12 * float(want.abs().max()))


def test_large_sinks_take_almost_all_the_mass():
    """SERVE-SINKS: a sink 30 above every score leaves each row a tiny but non-zero output."""
    _, got = run_case(GRID["large-sinks-window"])
    _, plain = run_case(GRID["large-sinks-window"], sinks=None)
    assert 0 < got.abs().max() < 1e-8 * plain.abs().max()


def _dense_qkv(seed, batch=2, hq=4, hkv=2, length=9, dim=8):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, hq, length, dim, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, hkv, length, dim, generator=gen, dtype=torch.float64)
    return q, k, torch.randn(batch, hkv, length, dim, generator=gen, dtype=torch.float64)


def _paged_dense(q, k, v, *, block_size, seq_lens, window=None, softcap=None, sinks=None, scale=0.35):
    """The oracle on dense BNSD inputs via contiguous_to_paged; q holds each sequence's last rows.
    Returns [B, Hq, n, Dv]."""
    batch, _, n, _ = q.shape
    k_cache, v_cache, table = serving.contiguous_to_paged(k, v, block_size=block_size)
    out = serving.paged_attention(
        q.permute(0, 2, 1, 3).flatten(0, 1), k_cache, v_cache, block_table=table,
        cu_seqlens_q=torch.arange(0, batch * n + 1, n), seq_lens=torch.as_tensor(seq_lens),
        sliding_window=window, softcap=softcap, sinks=sinks, scale=scale,
    )  # fmt: skip
    return out.reshape(batch, n, q.shape[1], -1).permute(0, 2, 1, 3)


@pytest.mark.parametrize("block_size", [1, 4, 5, 16])
@pytest.mark.parametrize("window", [None, 1, 4])
def test_prefill_is_one_sequence_per_row(block_size, window):
    """SERVE special case: n_b = L_b = S gives ATTN-PREFILL without padding."""
    q, k, v = _dense_qkv(1)
    want = attention.prefill_attention(q, k, v, sliding_window=window, padding_mask=None, scale=0.35)
    got = _paged_dense(q, k, v, block_size=block_size, seq_lens=[9, 9], window=window)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block_size", [1, 2, 5, 16])
@pytest.mark.parametrize("window", [None, 1, 3])
def test_decode_is_one_query_per_sequence(block_size, window):
    """SERVE special case: n_b = 1 gives ATTN-DECODE with per-sequence lengths (SERVE-DECODE)."""
    q, k, v = _dense_qkv(2, batch=3)
    q = q[:, :, :1]
    seq_lens = torch.tensor([9, 1, 6])
    want = attention.decode_attention(q, k, v, seq_lens, sliding_window=window, scale=0.35)
    got = _paged_dense(q, k, v, block_size=block_size, seq_lens=seq_lens, window=window)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_sink_softmax_empty_rows_are_zero():
    """SERVE-SINKS: a row with no allowed key gives zeros, with sinks (all mass on the sink) and without."""
    scores = torch.tensor([[1.0, 2.0, 3.0], [5.0, -1.0, 0.0]], dtype=torch.float64)
    allowed = torch.tensor([[True, False, True], [False, False, False]])
    for sinks in (None, torch.tensor([0.5, 100.0], dtype=torch.float64)):
        probs = serving.sink_softmax(scores, allowed, sinks)
        assert torch.equal(probs[1], torch.zeros(3, dtype=torch.float64))
        assert probs[0, 1] == 0


def test_sink_softmax_is_the_spec_formula():
    """SERVE-SINKS: a_j = exp(s_j) / (exp(sink) + sum_k exp(s_k)); a row sums below 1 with a sink."""
    scores = torch.tensor([[0.2, -1.0, 0.7], [800.0, 799.0, -5.0]], dtype=torch.float64)
    allowed = torch.tensor([[True, True, False], [True, True, True]])
    sinks = torch.tensor([0.4, 801.0], dtype=torch.float64)
    got = serving.sink_softmax(scores, allowed, sinks)
    e = math.exp
    row0 = [e(0.2) / (e(0.4) + e(0.2) + e(-1.0)), e(-1.0) / (e(0.4) + e(0.2) + e(-1.0)), 0.0]
    total1 = e(1) + 1 + e(-1) + e(-805)  # logits 801 (sink), 800, 799, -5, all shifted by -800
    row1 = [1 / total1, e(-1) / total1, e(-805) / total1]
    torch.testing.assert_close(got, torch.tensor([row0, row1], dtype=torch.float64), rtol=1e-14, atol=1e-300)
    assert (got.sum(-1) < 1).all()
    plain = serving.sink_softmax(scores, allowed, None).sum(-1)
    torch.testing.assert_close(plain, torch.ones(2, dtype=torch.float64), rtol=1e-15, atol=0)


def _read_slots(call):
    """Every (block, slot) some sequence may see: positions e_b .. L_b - 1 (SERVE-PAGED, SERVE-EVICT)."""
    block_size, window = call["k_cache"].shape[1], call["sliding_window"]
    starts, lengths = call["cu_seqlens_q"].tolist(), call["seq_lens"].tolist()
    read = set()
    for b, length in enumerate(lengths):
        first_query = length - (starts[b + 1] - starts[b])
        first = 0 if window is None else max(0, first_query - window + 1)
        read |= {(int(call["block_table"][b, j // block_size]), j % block_size) for j in range(first, length)}
    return read


@pytest.mark.parametrize("name", ["ragged-bs1", "shared-prefix-sinks", "large-sinks-window", "everything"])
def test_unread_positions_do_not_matter(name):
    """SERVE-PAGED / SERVE-EVICT: NaN in every slot no query sees (tails, spare blocks, evicted
    prefix) and garbage table padding leave the output finite and bitwise unchanged."""
    call, before = run_case(GRID[name])
    read = _read_slots(call)
    for cache in (call["k_cache"], call["v_cache"]):
        for blk in range(cache.shape[0]):
            for slot in range(cache.shape[1]):
                if (blk, slot) not in read:
                    cache[blk, slot] = float("nan")
    assert call["k_cache"].shape[0] * call["k_cache"].shape[1] > len(read)  # some slots are poisoned
    after = serving.paged_attention(**call)
    assert torch.isfinite(after).all()
    assert torch.equal(after, before)


@pytest.mark.parametrize("budget", [1, 7, 60])
@pytest.mark.parametrize("name", ["bs16-window4-softcap", "everything", "ragged-bs1"])
def test_query_blocks_do_not_change_the_result(monkeypatch, budget, name):
    """The oracle's split into query-row blocks (SCORE_BUDGET) gives the one-block result."""
    call, whole = run_case(GRID[name])
    monkeypatch.setattr(serving, "SCORE_BUDGET", budget)  # budget 1: one row per block
    blocked = serving.paged_attention(**call)
    torch.testing.assert_close(blocked, whole, rtol=1e-13, atol=1e-13)


def _additive(allowed: torch.Tensor) -> torch.Tensor:
    """A bool mask (True = attend) as transformers' additive float mask [1, 1, S, S]."""
    return torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))[None, None]


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("softcap", [0.5, 2.0, 50.0])
def test_softcap_equals_gemma2_eager(window, softcap):
    """SERVE-SOFTCAP peer: transformers' Gemma2 eager attention (softcap after scaling, before the mask).

    Gemma2's eager softmax runs in float32 (``dtype=torch.float32``) even for float64 inputs, so
    the comparison is at float32 resolution; dropping the softcap misses it by far more."""
    gemma2 = pytest.importorskip("transformers.models.gemma2.modeling_gemma2", reason="transformers absent")
    q, k, v = _dense_qkv(3, length=10)
    q = q * 3  # scores of several units, where tanh bends
    module = SimpleNamespace(num_key_value_groups=2, head_dim=8, training=False)
    mask = _additive(masks.encoder_attention_mask(10, sliding_window=window))
    peer, _ = gemma2.eager_attention_forward(
        module, q, k, v, mask, dropout=0.0, scaling=0.35, softcap=softcap
    )
    got = _paged_dense(q, k, v, block_size=3, seq_lens=[10, 10], window=window, softcap=softcap)
    torch.testing.assert_close(got, peer.transpose(1, 2), rtol=2e-6, atol=2e-6)
    if softcap < 50:
        uncapped = _paged_dense(q, k, v, block_size=3, seq_lens=[10, 10], window=window)
        assert (uncapped - peer.transpose(1, 2)).abs().max() > 1e-3


def _gpt_oss():
    return pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss", reason="transformers absent")


@pytest.mark.parametrize("window", [None, 1, 4])
@pytest.mark.parametrize("sinks", [(0.0, -1.0, 2.0, 0.5), (20.0, 30.0, 25.0, 40.0)])
def test_sinks_equal_gpt_oss_eager(window, sinks):
    """SERVE-SINKS peer: transformers' gpt-oss eager attention (sink logit concatenated, column dropped)."""
    gpt_oss = _gpt_oss()
    q, k, v = _dense_qkv(4, length=10)
    sinks = torch.tensor(sinks, dtype=torch.float64)
    module = SimpleNamespace(num_key_value_groups=2, sinks=sinks, training=False)
    mask = _additive(masks.encoder_attention_mask(10, sliding_window=window))
    peer, _ = gpt_oss.eager_attention_forward(module, q, k, v, mask, scaling=0.35, dropout=0.0)
    got = _paged_dense(q, k, v, block_size=4, seq_lens=[10, 10], window=window, sinks=sinks, softcap=None)
    want = peer.transpose(1, 2)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10 * float(want.abs().max()))


def test_sink_softmax_equals_gpt_oss_with_an_empty_row():
    """SERVE-SINKS peer for the generic masked form: a row with every key masked is zeros in both."""
    gpt_oss = _gpt_oss()
    q, k, v = _dense_qkv(5, batch=1, length=6)
    allowed = masks.encoder_attention_mask(6, sliding_window=2).clone()
    allowed[3] = False  # query 3 sees nothing: only sink_softmax's generic form can express it
    sinks = torch.tensor([0.3, -0.5, 1.5, 4.0], dtype=torch.float64)
    module = SimpleNamespace(num_key_value_groups=2, sinks=sinks, training=False)
    peer, _ = gpt_oss.eager_attention_forward(module, q, k, v, _additive(allowed), scaling=0.35, dropout=0.0)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = q @ kk.transpose(-1, -2) * 0.35
    got = serving.sink_softmax(scores, allowed, sinks[None, :, None]) @ vv
    torch.testing.assert_close(got, peer.transpose(1, 2), rtol=1e-10, atol=1e-10)
    assert torch.equal(got[:, :, 3], torch.zeros_like(got[:, :, 3]))


@pytest.mark.parametrize("name", ["ragged-bs1", "bs16-window4-softcap", "shared-prefix-sinks", "everything"])
@pytest.mark.parametrize("seed", range(3))
def test_nan_reaches_exactly_the_rows_that_see_it(name, seed):
    """SERVE-NAN: NaN in q, in cache slots (visible, masked, evicted, spare) and in a sink reach
    exactly the rows the brute force says (values: their column), none swallowed into zeros."""
    call, _ = run_case(GRID[name])
    gen = torch.Generator().manual_seed(seed)
    for arg in ("q", "k_cache", "v_cache", "sinks"):
        if call[arg] is None or (arg == "sinks" and seed != 1):
            continue
        poisoned = call[arg].clone()
        flat = poisoned.view(-1)
        flat[torch.randint(0, flat.numel(), (1 if arg == "sinks" else 3,), generator=gen)] = float("nan")
        call[arg] = poisoned
    got, want = serving.paged_attention(**call), _brute(call)
    assert torch.isnan(want).any() and not torch.isnan(want).all()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_masked_and_evicted_nan_values_do_not_leak():
    """SERVE-NAN: one sequence, all queries in one block: a NaN value at the last position (the
    future of every other row) and at position 0 (outside the later rows' window) reach only the
    rows that see them; position 0 and the last at once."""
    q, k, v = _dense_qkv(4, batch=1, length=6)
    v = v.clone()
    v[0, 0, 0, 1] = v[0, 1, 5, 3] = float("nan")
    got = _paged_dense(q, k, v, block_size=4, seq_lens=[6], window=3)[0]  # [Hq, 6, D]
    group = 2
    for h in range(4):
        want = torch.zeros(6, 8, dtype=torch.bool)
        if h // group == 0:
            want[:3, 1] = True  # rows 0..2 see position 0
        else:
            want[5, 3] = True  # only row 5 sees position 5
        assert torch.equal(torch.isnan(got[h]), want), h


def test_sink_softmax_propagates_nan_but_keeps_empty_rows_zero():
    """SERVE-NAN: a NaN score a row allows or a NaN sink makes the row NaN; a masked NaN score does
    not; a row with no allowed key is zeros."""
    nan = float("nan")
    scores = torch.tensor(
        [[nan, 1.0, 2.0], [1.0, nan, 0.0], [1.0, 2.0, 3.0], [nan, nan, nan]], dtype=torch.float64
    )
    allowed = torch.tensor([[True, True, True], [True, False, True], [True, True, True], [False] * 3])
    sinks = torch.tensor([0.0, 0.0, nan, 0.0], dtype=torch.float64)
    probs = serving.sink_softmax(scores, allowed, sinks)
    assert torch.isnan(probs[0]).all() and torch.isnan(probs[2]).all()
    assert torch.isfinite(probs[1]).all() and probs[1, 1] == 0
    assert torch.equal(probs[3], torch.zeros(3, dtype=torch.float64))
    assert torch.isnan(serving.sink_softmax(scores, allowed, None)[0]).all()

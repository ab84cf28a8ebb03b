"""The attention oracle against a per-element brute force, its one-block form, and SDPA's math path."""

from __future__ import annotations

import math
from operator import attrgetter

import pytest
import torch
import torch.nn.functional as F

from conformance.bad_input import names
from conformance.bad_input.attention import ERRORS
from reference import attention, masks


def brute_force_attention(q, k, v, allowed, scale):
    """ATTN element by element: softmax over allowed keys, zeros for an empty row, head h reads h // group.

    ATTN-NAN as the spec states it: only allowed keys are read; a NaN score makes the row NaN, a NaN
    value reaches its column through p * v (Python and torch arithmetic propagate it)."""
    batch, q_heads, q_len, dim = q.shape
    group = q_heads // k.shape[1]
    out = torch.zeros(batch, q_heads, q_len, dim, dtype=torch.float64)
    allowed = allowed.expand(batch, q_heads, q_len, k.shape[2])
    for b in range(batch):
        for h in range(q_heads):
            for i in range(q_len):
                keys = [j for j in range(k.shape[2]) if allowed[b, h, i, j]]
                if not keys:
                    continue
                scores = [scale * float(q[b, h, i].double() @ k[b, h // group, j].double()) for j in keys]
                if any(math.isnan(s) for s in scores):  # ATTN-NAN: a NaN score it sees: all NaN
                    out[b, h, i] = float("nan")
                    continue
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                for w, j in zip(weights, keys, strict=True):
                    out[b, h, i] += w / sum(weights) * v[b, h // group, j].double()
    return out


def _qkv(seed, batch=2, q_heads=4, kv_heads=2, q_len=9, kv_len=9, dim=8):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, q_heads, q_len, dim, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, kv_heads, kv_len, dim, generator=gen, dtype=torch.float64)
    return q, k, torch.randn(batch, kv_heads, kv_len, dim, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(4))
def test_attention_equals_brute_force(seed):
    """The oracle equals the per-element definition, including empty rows (zeros) and GQA."""
    q, k, v = _qkv(seed, q_len=5, kv_len=7)
    allowed = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(seed)) < 0.5
    allowed[0, 0, 0] = False
    got = attention.attention(q, k, v, allowed=allowed, scale=0.3)
    torch.testing.assert_close(got, brute_force_attention(q, k, v, allowed, 0.3), rtol=1e-12, atol=1e-12)
    assert torch.equal(got[0, :, 0], torch.zeros_like(got[0, :, 0]))


@pytest.mark.parametrize("block", [1, 3, 4, 64])
@pytest.mark.parametrize("window", [None, 1, 3])
def test_blocked_equals_one_block(monkeypatch, block, window):
    """Query blocks (and the per-block key span) give the one-block result to float64 rounding."""
    q, k, v = _qkv(7, q_len=13, kv_len=13)
    padding = torch.rand(2, 13, generator=torch.Generator().manual_seed(3)) < 0.8
    monkeypatch.setattr(attention, "QUERY_BLOCK", 10**9)
    whole = attention.prefill_attention(q, k, v, sliding_window=window, padding_mask=padding, scale=0.4)
    monkeypatch.setattr(attention, "QUERY_BLOCK", block)
    blocked = attention.prefill_attention(q, k, v, sliding_window=window, padding_mask=padding, scale=0.4)
    torch.testing.assert_close(blocked, whole, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("window", [None, 2, 5])
def test_prefill_equals_sdpa_math(window):
    """Peer: F.scaled_dot_product_attention (float64, bool mask, enable_gqa) agrees with the oracle."""
    q, k, v = _qkv(11)
    allowed = masks.encoder_attention_mask(9, sliding_window=window)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=0.35, enable_gqa=True)
    got = attention.prefill_attention(q, k, v, sliding_window=window, padding_mask=None, scale=0.35)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_decode_ignores_stale_rows_and_equals_prefill_row():
    """decode_attention at L equals prefill row L - 1; NaN beyond L changes nothing."""
    q, k, v = _qkv(5)
    prefill = attention.prefill_attention(q, k, v, sliding_window=3, padding_mask=None, scale=0.5)
    seq_lens = torch.tensor([4, 9])
    k_cache, v_cache = k.clone(), v.clone()
    k_cache[0, :, 4:] = float("nan")
    v_cache[0, :, 4:] = float("nan")
    q_token = torch.stack([q[0, :, 3], q[1, :, 8]])[:, :, None]
    got = attention.decode_attention(q_token, k_cache, v_cache, seq_lens, sliding_window=3, scale=0.5)
    want = torch.stack([prefill[0, :, 3], prefill[1, :, 8]])[:, :, None]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "call, argument",
    [
        (
            lambda q, k, v: attention.attention(
                q,
                k[:, :1].expand(2, 3, 9, 8),
                v[:, :1].expand(2, 3, 9, 8),
                allowed=torch.ones(9, 9, dtype=torch.bool),
                scale=1.0,
            ),
            "q",
        ),
        (lambda q, k, v: attention.attention(q, k, v, allowed=torch.ones(9, 9), scale=1.0), "allowed"),
        (
            lambda q, k, v: attention.attention(
                q, k, v, allowed=torch.ones(9, 9, dtype=torch.bool), scale=0.0
            ),
            "scale",
        ),
    ],
)
def test_attention_oracle_rejects_bad_input(call, argument):
    """ATTN-ERRORS for the plain attention op: ValueError naming the argument."""
    with pytest.raises(ValueError, match=names(argument)):
        call(*_qkv(0))


@pytest.mark.parametrize("case", ERRORS, ids=attrgetter("id"))
def test_attention_oracle_raises_the_shared_error_cases(case):
    """ATTN-ERRORS: every shared bad-input record raises ValueError naming the argument."""
    with pytest.raises(case.exception, match=case.match):
        case.call(attention)


def _poison(tensors, seed, count=3, value=float("nan")):
    """Copies of ``tensors`` with ``count`` random elements of each set to ``value``."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in tensors:
        t = t.clone()
        flat = t.view(-1)
        flat[torch.randint(0, flat.numel(), (count,), generator=gen)] = value
        out.append(t)
    return out


@pytest.mark.parametrize("block", [2, 256])
@pytest.mark.parametrize("seed", range(6))
def test_nan_reaches_exactly_the_rows_that_see_it(monkeypatch, seed, block):
    """ATTN-NAN: NaN in q, k and v reach exactly the rows (and, for v, the columns) the spec says,
    in blocks of rows too; a fully masked row stays zeros; none is swallowed into a zero row."""
    monkeypatch.setattr(attention, "QUERY_BLOCK", block)
    q, k, v = _poison(_qkv(seed, q_len=6, kv_len=7), seed)
    allowed = torch.rand(2, 1, 6, 7, generator=torch.Generator().manual_seed(seed)) < 0.5
    allowed[0, 0, 0] = False
    got = attention.attention(q, k, v, allowed=allowed, scale=0.3)
    want = brute_force_attention(q, k, v, allowed, 0.3)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert torch.equal(got[0, :, 0], torch.zeros_like(got[0, :, 0]))
    assert torch.isnan(want).any() and not torch.isnan(want).all()


def test_nan_in_a_visible_query_key_or_value_is_not_a_zero_row():
    """ATTN-NAN: the pattern where(total > 0, w / total, 0) would turn each of these rows into zeros."""
    q, k, v = _qkv(1, batch=1, q_heads=2, kv_heads=1, q_len=3, kv_len=3)
    q[0, 0, 0, 0] = k[0, 0, 1, 2] = v[0, 0, 2, 5] = float("nan")
    got = attention.prefill_attention(q, k, v, sliding_window=None, padding_mask=None, scale=0.5)
    assert torch.isnan(got[0, 0, 0]).all()  # its own query
    assert torch.isfinite(got[0, 1, 0]).all()  # row 0 of head 1 sees only key 0
    assert torch.isnan(got[0, :, 1:]).all()  # rows 1, 2 see key 1
    got = attention.decode_attention(q[:, :, 2:], k, v, torch.tensor([3]), sliding_window=1, scale=0.5)
    assert torch.isnan(got[..., 5]).all() and torch.isfinite(got[..., :5]).all()  # sees only v[2]


@pytest.mark.parametrize("poison", [float("nan"), float("inf"), float("-inf"), 1e30])
def test_what_a_row_cannot_see_never_reaches_it(poison):
    """ATTN-NAN, ATTN-PREFILL: non-finite keys and values at padded, future and out-of-window
    positions leave every valid row equal to the clean one (no 0 * NaN, no 0 * inf)."""
    q, k, v = _qkv(3, q_len=8, kv_len=8)
    padding = torch.ones(2, 8, dtype=torch.bool)
    padding[0, 2] = padding[1, 0] = False
    clean = attention.prefill_attention(q, k, v, sliding_window=3, padding_mask=padding, scale=0.4)
    kp, vp = k.clone(), v.clone()
    for b, j in ((0, 2), (1, 0)):  # padded keys: nobody sees them
        kp[b, :, j] = vp[b, :, j] = poison
    kp[:, :, 7] = vp[:, :, 7] = poison  # the last key: only row 7 sees it
    got = attention.prefill_attention(q, kp, vp, sliding_window=3, padding_mask=padding, scale=0.4)
    valid = padding[:, None, :7, None].expand(2, 4, 7, 8)
    torch.testing.assert_close(got[:, :, :7][valid], clean[:, :, :7][valid], rtol=0, atol=0)

"""The FIA emulator follows the documented semantics (spec/ascend.md, CANN-FIA, CANN-FIA-SPARSE)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.npu_emulator import npu_fused_infer_attention_score as fia
from reference import attention

COMPRESSED = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def _qkv(q_len=6, kv_len=6, batch=1):
    gen = torch.Generator().manual_seed(0)
    return (
        torch.randn(batch, 2, q_len, 8, generator=gen),
        torch.randn(batch, 1, kv_len, 8, generator=gen),
        torch.randn(batch, 1, kv_len, 8, generator=gen),
    )


def _fia(q, k, v, **options):
    """The emulated op on the tests' one layout: BNSD, 2 query heads over 1 kv head; its output."""
    return fia(q, k, v, num_heads=2, num_key_value_heads=1, input_layout="BNSD", **options)[0]


def _oracle(q, k, v, allowed, scale):
    return attention.attention(q, k, v, allowed=allowed, scale=scale).float()


def test_default_scale_is_one():
    """Without scale the op uses 1.0, not 1/sqrt(D)."""
    q, k, v = _qkv()
    out = _fia(q, k, v)
    torch.testing.assert_close(out, _oracle(q, k, v, torch.ones(6, 6, dtype=torch.bool), 1.0))


def test_mask_polarity_true_is_masked():
    """atten_mask True removes the key (spec/ascend.md, CANN-FIA-MASK)."""
    q, k, v = _qkv()
    masked = torch.ones(6, 6, dtype=torch.bool).triu(1)
    out = _fia(q, k, v, atten_mask=masked, sparse_mode=1, scale=0.3)
    torch.testing.assert_close(out, _oracle(q, k, v, ~masked, 0.3))


def test_band_mode_is_bottom_right_aligned():
    """sparse_mode 4 keeps i + d - pre <= j <= i + d + next with d = kv_len - q_len."""
    q, k, v = _qkv(q_len=3, kv_len=7)
    out = _fia(q, k, v, atten_mask=COMPRESSED, sparse_mode=4, pre_tokens=1, next_tokens=0, scale=0.3)
    i, j = torch.arange(3)[:, None], torch.arange(7)[None, :]
    torch.testing.assert_close(out, _oracle(q, k, v, (j >= i + 4 - 1) & (j <= i + 4), 0.3))


def test_query_length_one_ignores_band():
    """Query length 1 ignores pre_tokens and sparse_mode: every key within the length is seen
    (spec/ascend.md, CANN-FIA-DECODE)."""
    q, k, v = _qkv(q_len=1, kv_len=6)
    out = _fia(
        q,
        k,
        v,
        atten_mask=None,
        sparse_mode=4,
        pre_tokens=0,
        next_tokens=0,
        scale=0.3,
        actual_seq_lengths_kv=[5],
    )
    torch.testing.assert_close(out, _oracle(q, k, v, torch.arange(6) < 5, 0.3))


@pytest.mark.parametrize(
    "lengths",
    [[5, 3], (5, 3), np.array([5, 3]), [np.int32(5), np.int32(3)], torch.tensor([5, 3])],
    ids=["list", "tuple", "numpy", "numpy-ints", "tensor"],
)
def test_kv_lengths_take_every_int_list_spelling(lengths):
    """BNSD: actual_seq_lengths_kv as a Python or numpy int list or array keeps the first L keys."""
    q, k, v = _qkv(q_len=1, kv_len=6, batch=2)
    out = _fia(q, k, v, scale=0.3, actual_seq_lengths_kv=lengths)
    for b, length in enumerate((5, 3)):
        want = _oracle(q[b : b + 1], k[b : b + 1], v[b : b + 1], torch.arange(6) < length, 0.3)
        torch.testing.assert_close(out[b : b + 1], want)
    with pytest.raises(RuntimeError, match="actual_seq_lengths_kv"):
        _fia(q, k, v, scale=0.3, actual_seq_lengths_kv=np.array([5.0, 3.0]))


@pytest.mark.parametrize(
    "mask", [None, torch.ones(6, 6, dtype=torch.bool).triu(1), torch.zeros(2048, 2048, dtype=torch.bool)]
)
def test_band_modes_require_the_compressed_mask(mask):
    """Modes 2-4 reject anything but the 2048x2048 strict upper triangle."""
    q, k, v = _qkv()
    with pytest.raises(RuntimeError):
        _fia(q, k, v, atten_mask=mask, sparse_mode=4, scale=0.3)


def test_float_mask_is_rejected():
    """A float atten_mask raises, as on the NPU."""
    q, k, v = _qkv()
    with pytest.raises(RuntimeError):
        _fia(q, k, v, atten_mask=torch.zeros(6, 6), sparse_mode=1, scale=0.3)

"""The mask oracles against brute-force per-element definitions and their peers."""

from __future__ import annotations

import importlib.util
import itertools
from operator import attrgetter

import pytest
import torch

from conformance.bad_input.masks import ERRORS
from reference import masks


def brute_force_encoder_mask(seq_len, window, padding):
    """MASK-ENC written element by element from the spec text."""
    batch = 1 if padding is None else padding.shape[0]
    out = torch.zeros(batch, 1, seq_len, seq_len, dtype=torch.bool)
    for b, i, j in itertools.product(range(batch), range(seq_len), range(seq_len)):
        visible = j <= i and (window is None or i - j < window)
        out[b, 0, i, j] = visible and (padding is None or bool(padding[b, j]))
    return out if padding is not None else out[0, 0]


@pytest.mark.parametrize("seq_len", [1, 2, 5, 9])
@pytest.mark.parametrize("window", [None, 1, 2, 4, 9, 11])
def test_encoder_mask_equals_brute_force(seq_len, window):
    """encoder_attention_mask equals the per-element definition, with and without padding."""
    padding = torch.rand(3, seq_len, generator=torch.Generator().manual_seed(seq_len)) < 0.6
    assert torch.equal(
        masks.encoder_attention_mask(seq_len, sliding_window=window),
        brute_force_encoder_mask(seq_len, window, None),
    )
    got = masks.encoder_attention_mask(seq_len, sliding_window=window, padding_mask=padding)
    assert torch.equal(got, brute_force_encoder_mask(seq_len, window, padding))


@pytest.mark.parametrize("window", [1, 3, 7, 20])
def test_swa_decode_mask_equals_brute_force(window):
    """swa_decode_mask: True exactly outside max(0, L - window) <= j <= L - 1."""
    kv_len, seq_lens = 12, torch.tensor([1, 2, 5, 12])
    got = masks.swa_decode_mask(seq_lens, kv_len, window=window)
    for b, length in enumerate(seq_lens.tolist()):
        for j in range(kv_len):
            assert bool(got[b, 0, j]) == (not (max(0, length - window) <= j <= length - 1))


@pytest.mark.parametrize("window", [1, 2, 5, 16])
def test_converters_keep_window_keys(window):
    """FlashAttention left+1 and CANN pre_tokens+1 keys (inclusive) equal W, as the decode window does."""
    left, right = masks.flash_attention_window(window)
    tokens = masks.cann_prefill_tokens(window)
    seq_len = 40
    for i in range(seq_len):
        flash = [j for j in range(seq_len) if i - left <= j <= i + right]
        cann = [j for j in range(seq_len) if i - tokens["pre_tokens"] <= j <= i + tokens["next_tokens"]]
        hf = [j for j in range(seq_len) if j <= i and i - j < window]
        assert flash == cann == hf
    assert masks.decode_mask_window(window) == window


@pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers (peers extra) not installed"
)
@pytest.mark.parametrize("window", [None, 1, 3, 8, 30])
def test_encoder_mask_equals_transformers(window):
    """The oracle agrees with transformers.masking_utils (sdpa_mask, sliding_window_overlay, padding)."""
    from backends.transformers_peer import BACKEND

    padding = torch.rand(2, 17, generator=torch.Generator().manual_seed(1)) < 0.7
    for pad in (None, padding):
        want = masks.encoder_attention_mask(17, sliding_window=window, padding_mask=pad)
        assert torch.equal(BACKEND.encoder_attention_mask(17, sliding_window=window, padding_mask=pad), want)


@pytest.mark.parametrize("case", ERRORS, ids=attrgetter("id"))
def test_mask_oracle_rejects_bad_input(case):
    """MASK-ERRORS: every shared bad-input record raises ValueError naming the argument."""
    with pytest.raises(case.exception, match=case.match):
        case.call(masks)

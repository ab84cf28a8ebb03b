"""The emulated npu_rotary_mul and npu_mrope against the rope oracle (spec/ascend.md,
CANN-ROTARY-MUL, CANN-MROPE), and their documented rejections."""

from __future__ import annotations

import pytest
import torch

from backends import npu_emulator as npu
from reference import rope


def _case(seed=0, tokens=5, heads=2, d=12, r=8):
    gen = torch.Generator().manual_seed(seed)
    inv = 1.0 / (10000 ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    cache = rope.rope_cos_sin(torch.arange(40), inv, attention_factor=1.0).float()
    q, k = torch.randn(tokens, heads, d, generator=gen), torch.randn(tokens, 1, d, generator=gen)
    return torch.randint(0, 40, (tokens,), generator=gen), q, k, cache


@pytest.mark.parametrize("mode, neox", [("half", True), ("interleave", False)])
def test_rotary_mul_is_the_rotation_of_each_mode(mode, neox):
    positions, q, _, cache = _case(d=8)
    c, s = cache[positions, :4], cache[positions, 4:]
    r1 = torch.cat([c, c], -1) if neox else c.repeat_interleave(2, -1)
    r2 = torch.cat([s, s], -1) if neox else s.repeat_interleave(2, -1)
    got = npu.npu_rotary_mul(q[None], r1[None, :, None], r2[None, :, None], rotary_mode=mode)[0]
    want, _ = rope.rotary_embedding(positions, q, q[:, :1], cache, is_neox_style=neox)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode, neox", [("half", True), ("interleave", False)])
def test_mrope_plain_and_sections(mode, neox):
    positions, q, k, cache = _case()
    got_q, got_k = npu.npu_mrope(
        positions, q.reshape(5, -1), k.reshape(5, -1), cache, 12, mrope_section=[0, 0, 0], rotary_mode=mode
    )
    want_q, want_k = rope.rotary_embedding(positions, q, k, cache, is_neox_style=neox)
    torch.testing.assert_close(got_q.reshape(q.shape).double(), want_q, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_k.reshape(k.shape).double(), want_k, rtol=1e-6, atol=1e-6)
    rows = torch.stack([positions, positions.flip(0), (positions * 7) % 40])
    got_q, _ = npu.npu_mrope(
        rows, q.reshape(5, -1), k.reshape(5, -1), cache, 12, mrope_section=[2, 1, 1], rotary_mode=mode
    )
    want_q, _ = rope.mrope(
        rows, q, k, cache, mrope_section=[2, 1, 1], is_neox_style=neox, mrope_interleaved=False
    )
    torch.testing.assert_close(got_q.reshape(q.shape).double(), want_q, rtol=1e-6, atol=1e-6)


def test_documented_rejections():
    positions, q, k, cache = _case()
    with pytest.raises(ValueError, match="rotary_mode"):
        npu.npu_mrope(positions, q.reshape(5, -1), k.reshape(5, -1), cache, 12, rotary_mode="interleaved")
    with pytest.raises(ValueError, match="4-D"):
        npu.npu_rotary_mul(q, q, q)
    with pytest.raises(ValueError, match="even and < 896"):
        npu.npu_rotary_mul(torch.ones(1, 1, 1, 896), torch.ones(896), torch.ones(896))


@pytest.mark.parametrize("mode, neox", [("half", True), ("interleave", False)])
def test_apply_rotary_pos_emb_rotates_in_place(mode, neox):
    """CANN-APPLY-ROPE: TND query and key overwritten with their rotation, and returned."""
    positions, q, k, cache = _case(d=8)
    c, s = cache[positions, :4], cache[positions, 4:]
    r1 = torch.cat([c, c], -1) if neox else c.repeat_interleave(2, -1)
    r2 = torch.cat([s, s], -1) if neox else s.repeat_interleave(2, -1)
    want_q, want_k = rope.rotary_embedding(positions, q, k, cache, is_neox_style=neox)
    q2, k2 = q.clone(), k.clone()
    out_q, out_k = npu.npu_apply_rotary_pos_emb(q2, k2, r1[:, None], r2[:, None], layout=4, rotary_mode=mode)
    assert out_q is q2 and out_k is k2
    torch.testing.assert_close(q2.double(), want_q, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(k2.double(), want_k, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="layout"):
        npu.npu_apply_rotary_pos_emb(q2, k2, r1[:, None], r2[:, None], layout=5)

"""Self-tests of the quant oracles (reference/quant.py) against a brute force written from
spec/quant.md's text (Python fractions, the fp8 grid enumerated from its 256 bit patterns) and
against PyTorch's own integer and scaled matmuls as peers."""

from __future__ import annotations

import bisect
import math
from fractions import Fraction
from operator import attrgetter

import pytest
import torch

from conformance.bad_input.quant import ERRORS
from reference import quant as oracle

FP8 = oracle.FP8_DTYPES


def _grid(fp8_dtype) -> list[tuple[Fraction, int]]:
    """Every finite value of the format with its bit pattern (from the bits, not from arithmetic)."""
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    values = bits.view(fp8_dtype).double()
    finite = [
        (Fraction(v.item()), int(b)) for v, b in zip(values, bits, strict=True) if math.isfinite(v.item())
    ]
    return sorted(finite)


def _brute_fp8(t: Fraction, grid, top: Fraction) -> Fraction:
    """QUANT-FP8-TENSOR from the text: saturate to [-F, F], then the nearest grid value, a tie to the
    one whose bit pattern is even (its last mantissa bit 0). ``grid`` sorted by value."""
    t = max(-top, min(top, t))
    i = bisect.bisect_left(grid, (t, -1))
    near = [p for p in grid[max(i - 1, 0) : i + 1]]
    best = min(abs(v - t) for v, _ in near)
    return min((p for p in near if abs(p[0] - t) == best), key=lambda p: p[1] % 2)[0]


def _brute_int8_row(row: list[Fraction]) -> tuple[list[int], Fraction]:
    """QUANT-INT8-SCALE / -ROUND / -TIES / -ZERO-ROW: scale amax / 127; q the quotient rounded half
    to even (Python's round of a Fraction), 0 on a zero row."""
    amax = max(abs(v) for v in row)
    if amax == 0:
        return [0] * len(row), Fraction(0)
    return [round(v * 127 / amax) for v in row], amax / 127


def test_int8_quant_matches_brute_force():
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 37, generator=gen) * 3).to(torch.bfloat16)
    x[2] = 0  # QUANT-INT8-ZERO-ROW
    x[3, :4] = torch.tensor([127.0, 2.5, -2.5, 3.5])  # QUANT-INT8-TIES: scale 1, exact ties
    q, scale = oracle.dynamic_int8_quant(x)
    for r in range(x.shape[0]):
        want_q, want_s = _brute_int8_row([Fraction(v) for v in x[r].double().tolist()])
        assert q[r].tolist() == want_q
        assert Fraction(scale[r, 0].item()) == pytest.approx(want_s, rel=1e-15)
    assert q[3, :4].tolist() == [127, 2, -2, 4]


@pytest.mark.parametrize("fp8_dtype", FP8, ids=str)
def test_fp8_round_matches_the_enumerated_grid(fp8_dtype):
    grid = _grid(fp8_dtype)
    top = Fraction(torch.finfo(fp8_dtype).max)
    gen = torch.Generator().manual_seed(1)
    t = torch.randn(400, generator=gen, dtype=torch.float64) * torch.exp2(
        torch.randint(-12, 10, (400,), generator=gen).double()
    )
    # midpoints between neighbours, the largest value and beyond: ties and saturation
    mids = [
        float((a + b) / 2)
        for (a, _), (b, _) in zip(sorted(grid)[100:110], sorted(grid)[101:111], strict=True)
    ]
    t = torch.cat([t, torch.tensor(mids + [500.0, -1e4, float(top) + 1], dtype=torch.float64)])
    got = oracle.fp8_round(t, fp8_dtype)
    want = [float(_brute_fp8(Fraction(v), grid, top)) for v in t.tolist()]
    assert got.tolist() == want


@pytest.mark.parametrize("fp8_dtype", FP8, ids=str)
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_group_quant_matches_brute_force(fp8_dtype, use_ue8m0):
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(3, 64, generator=gen) * 5).to(torch.bfloat16)
    x[1, 32:] = 0  # a zero group
    q, scales = oracle.fp8_group_quant(x, group_size=32, fp8_dtype=fp8_dtype, use_ue8m0=use_ue8m0)
    grid, top = _grid(fp8_dtype), Fraction(torch.finfo(fp8_dtype).max)
    for r in range(3):
        for g in range(2):
            vals = [Fraction(v) for v in x[r, 32 * g : 32 * (g + 1)].double().tolist()]
            amax = max(abs(v) for v in vals)
            if amax == 0:
                assert q[r, 32 * g : 32 * (g + 1)].abs().max() == 0 and scales[r, g] > 0
                continue
            s = amax / top
            if use_ue8m0:  # the power of two at or above s, from the text
                e = math.ceil(math.log2(s))
                s = Fraction(2) ** e if Fraction(2) ** e >= s else Fraction(2) ** (e + 1)
            assert Fraction(scales[r, g].item()) == pytest.approx(s, rel=1e-15)
            want = [float(_brute_fp8(v / s, grid, top)) for v in vals]
            assert q[r, 32 * g : 32 * (g + 1)].tolist() == pytest.approx(want, rel=1e-12)


def test_int8_mm_matches_int_mm_and_loops():
    """QUANT-W8A8-MM / -EXACT: the integer sum equals torch._int_mm's exact int32 result; the
    dequantization by per-token x per-channel scales and the bias equal explicit loops."""
    gen = torch.Generator().manual_seed(3)
    a = torch.randint(-127, 128, (5, 300), generator=gen, dtype=torch.int8)
    b = torch.randint(-127, 128, (300, 7), generator=gen, dtype=torch.int8)
    sa, sb = torch.rand(5, 1, generator=gen) + 0.1, torch.rand(1, 7, generator=gen) + 0.1
    bias = torch.randn(7, generator=gen).to(torch.bfloat16)
    out = oracle.int8_scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    acc = torch._int_mm(a, b)  # peer: exact int32
    for m in range(5):
        for n in range(7):
            exact = sum(int(a[m, k]) * int(b[k, n]) for k in range(300))
            assert exact == int(acc[m, n])
            want = Fraction(exact) * Fraction(sa[m, 0].item()) * Fraction(sb[0, n].item()) + Fraction(
                bias[n].item()
            )
            assert out[m, n].item() == pytest.approx(float(want), rel=1e-15)
    per_tensor = oracle.int8_scaled_mm(a, b, sa[:1, 0], sb[0, :1], bias=None, out_dtype=torch.float16)
    assert torch.equal(per_tensor, acc.double() * sa[0, 0].double() * sb[0, 0].double())


def test_int8_mm_is_exact_where_int16_wraps():
    a = torch.full((1, 7168), 127, dtype=torch.int8)
    b = torch.full((7168, 1), 127, dtype=torch.int8)
    b[1::2] = -127
    b[-1] = 1  # the sum cancels to 127 * 1 (K even: 3583 pairs cancel, then 127 * -127 + 127)
    one = torch.ones(1)
    got = oracle.int8_scaled_mm(a, b, one, one, bias=None, out_dtype=torch.bfloat16)
    assert got.item() == float(torch._int_mm(a, b).item())


@pytest.mark.parametrize("fp8_dtype", FP8, ids=str)
def test_block_mm_matches_scaled_mm_and_element_loops(fp8_dtype):
    """QUANT-FP8-BLOCK-MM / -PARTIAL: with one block per row (bn = 1, bk >= K) it is torch._scaled_mm's
    rowwise product (the peer); with 4 x 8 blocks and partial trailing ones, element loops."""
    gen = torch.Generator().manual_seed(4)
    m, n, k = 3, 9, 19
    a = torch.randn(m, k, generator=gen).to(fp8_dtype)
    b = torch.randn(n, k, generator=gen).to(fp8_dtype)
    sa, sb = torch.rand(m, 1, generator=gen) + 0.5, torch.rand(n, 1, generator=gen) + 0.5
    got = oracle.fp8_block_scaled_mm(a, b, sa, sb, block_size=(1, 32), out_dtype=torch.bfloat16)
    if fp8_dtype == torch.float8_e4m3fn:
        peer = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t().contiguous(), out_dtype=torch.float32)
        torch.testing.assert_close(got.float(), peer, rtol=1e-6, atol=1e-6)
    a_s = torch.rand(m, math.ceil(k / 8), generator=gen) + 0.5
    b_s = torch.rand(math.ceil(n / 4), math.ceil(k / 8), generator=gen) + 0.5
    got = oracle.fp8_block_scaled_mm(a, b, a_s, b_s, block_size=(4, 8), out_dtype=torch.float16)
    F = Fraction
    A, B, AS, BS = a.double().tolist(), b.double().tolist(), a_s.double().tolist(), b_s.double().tolist()
    for i in range(m):
        for j in range(n):
            terms = (F(A[i][c]) * F(AS[i][c // 8]) * F(B[j][c]) * F(BS[j // 4][c // 8]) for c in range(k))
            want = sum(terms)
            assert got[i, j].item() == pytest.approx(float(want), rel=1e-14, abs=1e-300)


def test_fnuz_conversion_keeps_the_dequantized_values():
    """QUANT-FNUZ-CONVERT: every e4m3fn bit pattern (but NaN), reinterpreted as e4m3fnuz with doubled
    scales, dequantizes to the same value; the oracle's halved values are those bits' fnuz values."""
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    weight = bits.view(torch.float8_e4m3fn)
    finite = torch.isfinite(weight.double())
    weight = weight[finite]
    w_new, s_new, i_new = oracle.fp8_fn_to_fnuz(weight, torch.tensor([0.75]), None)
    as_fnuz = weight.view(torch.uint8).clone()
    as_fnuz[as_fnuz == 0x80] = 0
    assert torch.equal(w_new, as_fnuz.view(torch.float8_e4m3fnuz).double())
    assert s_new.item() == 1.5 and i_new is None
    assert torch.equal(w_new * s_new, weight.double() * 0.75)


def test_fnuz_uses_224_or_240_and_fn_448():
    assert oracle.fp8_max_values(torch.float8_e4m3fn) == (448.0,)
    assert oracle.fp8_max_values(torch.float8_e4m3fnuz) == (240.0, 224.0)


def test_magnitude_bounds_the_sum():
    gen = torch.Generator().manual_seed(5)
    a = torch.randint(-127, 128, (3, 40), generator=gen, dtype=torch.int8)
    b = torch.randint(-127, 128, (40, 4), generator=gen, dtype=torch.int8)
    sa, sb = torch.rand(3, 1, generator=gen), torch.rand(1, 4, generator=gen)
    out = oracle.int8_scaled_mm(a, b, sa, sb, bias=None, out_dtype=torch.bfloat16)
    mag = oracle.gemm_magnitude(a, b, sa, sb)
    assert (out.abs() <= mag).all() and (mag > 0).all()


@pytest.mark.parametrize("case", ERRORS, ids=attrgetter("id"))
def test_oracle_raises_the_shared_error_cases(case):
    """QUANT-ERRORS: every shared bad-input record raises its exception, naming the argument."""
    with pytest.raises(case.exception, match=case.match):
        case.call(oracle)


def _brute_w4_weight(qweight, scales, qzeros, group_size, packing):
    """QUANT-W4A16-* from the text, one element at a time with Python ints: AWQ nibble i (shift 4 i) holds
    column 0, 2, 4, 6, 1, 3, 5, 7 of its group; GPTQ nibble i of word r holds row 8 r + i, zeros in order
    along N, a v1 zero stored minus one."""
    awq_columns = [0, 2, 4, 6, 1, 3, 5, 7]
    qw, qz, sc = qweight.tolist(), qzeros.tolist(), scales.double().tolist()

    def nibble(word, i):
        return ((word & 0xFFFFFFFF) >> (4 * i)) & 0xF

    k_size = len(qw) if packing == "awq" else 8 * len(qw)
    n_size = len(sc[0])
    w = [[0.0] * n_size for _ in range(k_size)]
    for k in range(k_size):
        g = k // group_size
        for n in range(n_size):
            if packing == "awq":
                q = nibble(qw[k][n // 8], awq_columns.index(n % 8))
                zero = nibble(qz[g][n // 8], awq_columns.index(n % 8))
            else:
                q = nibble(qw[k // 8][n], k % 8)
                zero = nibble(qz[g][n // 8], n % 8) + (1 if packing == "gptq" else 0)
            w[k][n] = (q - zero) * sc[g][n]
    return torch.tensor(w, dtype=torch.float64)


@pytest.mark.parametrize("packing", ["awq", "gptq", "gptq_v2"])
def test_w4a16_matches_brute_force_unpacking(packing):
    """The oracle's weight equals the element-by-element reading of the text, on words the strategies
    packed (negative int32 words included), and the GEMM is x @ that weight."""
    from conformance.strategies.quant import W4Recipe
    from reference.quant_w4a16 import w4a16_weight

    x, qweight, scales, qzeros = W4Recipe((2, 64, 16), 32, packing, torch.float16, 7).make()
    assert bool((qweight < 0).any())  # top nibbles >= 8 make negative words
    want = _brute_w4_weight(qweight, scales, qzeros, 32, packing)
    got = w4a16_weight(qweight, scales, qzeros, group_size=32, packing=packing)
    assert torch.equal(got, want)
    out = oracle.w4a16_mm(x, qweight, scales, qzeros, group_size=32, packing=packing)
    torch.testing.assert_close(out, x.double() @ want, rtol=1e-12, atol=1e-12)


def test_w4a16_packings_differ():
    """The same words read as AWQ and as GPTQ v2 give different weights (the order is data)."""
    from conformance.strategies.quant import W4Recipe

    x, qweight, scales, qzeros = W4Recipe((2, 64, 64), 32, "awq", torch.float16, 8).make()
    awq = oracle.w4a16_mm(x, qweight, scales, qzeros, group_size=32, packing="awq")
    swapped = oracle.w4a16_mm(x, qweight.T.contiguous(), scales, qzeros, group_size=32, packing="gptq_v2")
    assert not torch.allclose(awq, swapped)

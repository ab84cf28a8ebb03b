"""Conformance properties for spec/masks.md: the encoder mask, the Ascend decode mask, window conversions."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.masks import ERRORS
from conformance.checks import check, describe
from conformance.harness import profiles
from conformance.strategies.common import row_strided_view, strided_view
from conformance.strategies.masks import CONVERTER_WINDOWS, decode_mask_cases, mask_cases
from reference import masks as oracle


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> tuple[tuple, str]:
    where = tuple(int(i) for i in (got.cpu() != want.cpu()).nonzero()[0])
    count = int((got.cpu() != want.cpu()).sum())
    return where, f"{count} entries differ; first at {where}: got {bool(got.cpu()[where])}"


def encoder_relation(where: tuple, got: bool, *, sliding_window, padding_mask) -> str:
    """What the first wrong entry of an encoder mask means, the decisive values first (MASK-ENC):
    ``row 7 attends key 2 at distance 5 >= sliding_window 5``."""
    i, j = where[-2], where[-1]
    if j > i:
        why = "a later key (causal)"
    elif sliding_window is not None and i - j >= sliding_window:
        why = f"at distance {i - j} >= sliding_window {sliding_window}"
    elif padding_mask is not None and not bool(padding_mask[where[0], j]):
        why = f"a padded key of sequence {where[0]}"
    else:
        window = f" < sliding_window {sliding_window}" if sliding_window is not None else ""
        why = f"at distance {i - j}{window}, a real key"
    return f"row {i} {'attends' if got else 'does not attend'} key {j} {why}"


def decode_relation(where: tuple, got: bool, *, seq_lens, window) -> str:
    """The first wrong entry of the Ascend decode mask (True = masked out; MASK-SWA-DECODE)."""
    b, j = where[0], where[-1]
    last = int(seq_lens[b]) - 1
    first = max(0, last + 1 - window)
    where_key = "one of" if first <= j <= last else "outside"
    return (f"sequence {b} {'masks' if got else 'keeps'} key {j}, {where_key} keys {first}..{last} "
            f"visible at position {last} with window {window}")  # fmt: skip


def check_mask(got, want: torch.Tensor, *, device, clause: str, context: str, relation=None) -> None:
    """MASK-DTYPE first (bool), then shape, device and every value (``clause``); ``relation(where,
    got)`` says what the first wrong entry means."""
    check(
        isinstance(got, torch.Tensor) and got.dtype == torch.bool,
        clause="MASK-DTYPE",
        message=f"{context}: mask dtype {getattr(got, 'dtype', type(got).__name__)}, expected torch.bool",
    )
    check(
        tuple(got.shape) == tuple(want.shape) and got.device.type == torch.device(device).type,
        clause=clause,
        message=f"{context}: mask shape {tuple(got.shape)} on {got.device}, "
        f"expected {tuple(want.shape)} on {device}",
    )
    if not torch.equal(got.cpu(), want.cpu()):
        where, difference = _first_difference(got, want)
        said = relation(where, bool(got.cpu()[where])) if relation else None
        message = f"{context}: {said}; {difference}" if said else f"{context}: {difference}"
        check(False, clause=clause, message=message, relation=said)


@pytest.mark.clause("MASK-ENC", "MASK-DTYPE")
@pytest.mark.op("encoder_attention_mask")
@given(case=mask_cases())
def test_encoder_mask_matches_oracle(backend, device, case):
    """The encoder mask equals MASK-ENC exactly: bool, shape, device, every entry."""
    padding_mask = case.padding_mask()
    padding_mask = None if padding_mask is None else padding_mask.to(device)
    got = backend.encoder_attention_mask(
        case.seq_len, sliding_window=case.sliding_window, padding_mask=padding_mask, device=device
    )
    want = oracle.encoder_attention_mask(
        case.seq_len, sliding_window=case.sliding_window, padding_mask=padding_mask
    )
    context = describe(
        backend, device, "encoder_attention_mask", seq_len=case.seq_len, sliding_window=case.sliding_window,
        padding=case.padding, batch=case.batch,
    )  # fmt: skip
    explain = lambda where, value: encoder_relation(  # noqa: E731 - bound to this case's inputs
        where, value, sliding_window=case.sliding_window, padding_mask=case.padding_mask()
    )
    check_mask(got, want, device=device, clause="MASK-ENC", context=context, relation=explain)


INTEGER_PADDING = mask_cases(max_seq_len=64, paddings=("right", "left", "holes"))


@pytest.mark.clause("MASK-ENC")
@pytest.mark.op("encoder_attention_mask")
@given(case=INTEGER_PADDING, device_given=st.booleans(), sliced=st.booleans())
def test_encoder_mask_accepts_integer_padding(backend, device, case, device_given, sliced):
    """A 0/1 int64 padding mask, contiguous or the leading columns of a wider one, gives the same mask
    as its bool form (device given, or omitted: then the padding mask's)."""
    layout = "column-slice" if sliced else "contiguous"
    _check_integer_padding(backend, device, case, layout=layout, device_given=device_given, clause="MASK-ENC")


@pytest.mark.clause("MASK-VIEWS")
@pytest.mark.op("encoder_attention_mask")
@profiles.should_examples()
@given(case=INTEGER_PADDING)
def test_should_read_a_strided_padding_mask(backend, device, case):
    """A 0/1 int64 padding mask given as every other element of a buffer: its bool form's mask."""
    _check_integer_padding(backend, device, case, layout="strided", device_given=True, clause="MASK-VIEWS")


PADDING_VIEWS = {"contiguous": lambda t: t, "column-slice": row_strided_view, "strided": strided_view}


def _check_integer_padding(backend, device, case, *, layout: str, device_given: bool, clause: str) -> None:
    padding_mask = case.padding_mask().to(device)
    given_mask = PADDING_VIEWS[layout](padding_mask.long())
    # device omitted every other draw: MASK-ENC's default is the padding mask's device
    where = {"device": device} if device_given else {}
    got = backend.encoder_attention_mask(
        case.seq_len, sliding_window=case.sliding_window, padding_mask=given_mask, **where
    )
    want = oracle.encoder_attention_mask(
        case.seq_len, sliding_window=case.sliding_window, padding_mask=padding_mask
    )
    context = describe(
        backend, device, "encoder_attention_mask", seq_len=case.seq_len, padding="int64 0/1", layout=layout
    )
    explain = lambda where, value: encoder_relation(  # noqa: E731 - bound to this case's inputs
        where, value, sliding_window=case.sliding_window, padding_mask=padding_mask.cpu()
    )
    check_mask(got, want, device=device, clause=clause, context=context, relation=explain)


@pytest.mark.clause("MASK-SWA-DECODE", "MASK-DTYPE")
@pytest.mark.op("swa_decode_mask")
@given(case=decode_mask_cases())
def test_swa_decode_mask_matches_oracle(backend, device, case):
    """The decode mask equals MASK-SWA-DECODE exactly (True = masked out)."""
    _check_decode_mask(backend, device, case, strided=False, clause="MASK-SWA-DECODE")


@pytest.mark.clause("MASK-VIEWS")
@pytest.mark.op("swa_decode_mask")
@profiles.should_examples()
@given(case=decode_mask_cases())
def test_should_read_strided_seq_lens(backend, device, case):
    """seq_lens given as every other element of a buffer: MASK-SWA-DECODE's mask."""
    _check_decode_mask(backend, device, case, strided=True, clause="MASK-VIEWS")


def _check_decode_mask(backend, device, case, *, strided: bool, clause: str) -> None:
    seq_lens, kv_len, window = case
    given_lens = strided_view(seq_lens.to(device)) if strided else seq_lens.to(device)
    got = backend.swa_decode_mask(given_lens, kv_len, window=window)
    want = oracle.swa_decode_mask(seq_lens, kv_len, window=window)
    context = describe(
        backend, device, "swa_decode_mask", seq_lens=seq_lens.tolist(), kv_len=kv_len, window=window,
        strided=strided,
    )  # fmt: skip
    explain = lambda where, value: decode_relation(where, value, seq_lens=seq_lens, window=window)  # noqa: E731
    check_mask(got, want, device=device, clause=clause, context=context, relation=explain)


CONVERTERS = ["flash_attention_window", "cann_prefill_tokens", "decode_mask_window"]
# WINDOW-CONV: (-1, 0) and (-1, -1) both keep every causal key (flash-attn sets right = 0 when causal).
FLASH_NO_WINDOW = [(-1, 0), (-1, -1)]


@pytest.mark.clause("WINDOW-CONV")
@pytest.mark.parametrize("converter", [pytest.param(c, marks=pytest.mark.op(c), id=c) for c in CONVERTERS])
@pytest.mark.parametrize("sliding_window", CONVERTER_WINDOWS)
def test_window_converter(backend, device, converter, sliding_window):
    """A backend's window converter returns exactly the documented value for W; without a window,
    the table fixes only cann_prefill_tokens' pre_tokens (next_tokens is free: a sparse mode may
    ignore it) and accepts both of FlashAttention's causal "no window" spellings."""
    if sliding_window is None and converter == "decode_mask_window":
        pytest.skip("decode_mask_window takes a window; None is not in its domain")
    got = getattr(backend, converter)(sliding_window)
    want = getattr(oracle, converter)(sliding_window)
    if sliding_window is None and converter == "cann_prefill_tokens":
        want = {"pre_tokens": want["pre_tokens"]}
        got = {"pre_tokens": got["pre_tokens"]} if isinstance(got, dict) and "pre_tokens" in got else got
    if sliding_window is None and converter == "flash_attention_window" and got in FLASH_NO_WINDOW:
        want = got
    check(
        got == want,
        clause="WINDOW-CONV",
        message=f"backend {backend.name!r}: {converter}({sliding_window!r}) = {got!r}, expected {want!r}",
    )


@pytest.mark.clause("MASK-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad mask input raises ValueError naming the argument."""
    check_backend_raises(case, backend, device)


@pytest.mark.clause("MASK-ENC")
@pytest.mark.op("encoder_attention_mask")
@given(seq_len=st.integers(2, 64), extra=st.integers(0, 3))
def test_window_at_least_seq_len_is_causal(backend, device, seq_len, extra):
    """W >= S gives exactly the causal lower triangle; W = 1 exactly the diagonal."""
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    got = backend.encoder_attention_mask(seq_len, sliding_window=seq_len + extra, device=device)
    check_mask(
        got, causal, device=device, clause="MASK-ENC", context=f"{backend.name}: W={seq_len + extra} >= S"
    )
    got = backend.encoder_attention_mask(seq_len, sliding_window=1, device=device)
    check_mask(
        got,
        torch.eye(seq_len, dtype=torch.bool),
        device=device,
        clause="MASK-ENC",
        context=f"{backend.name}: W=1",
    )

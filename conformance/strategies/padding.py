"""Hypothesis strategies for the padding properties (spec/padding.md): rows added the way graph
capture pads a batch, and padded serving requests.

A ``RowPadding`` says how many rows follow a batch's real rows and what they hold (PAD-ROWS: the
capture sizes a batch is padded to, and FILLS: what a reused input buffer holds there). A
``ServePadding`` says which padded requests follow a serving batch's real ones (PAD-SERVE: one
query and one key each, reading the reserved null block or a stale block-table row).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies.common import seeds

# PAD-ROWS: the batch sizes a graph is captured at (vLLM's default: 1, 2, 4, then multiples of 8): a
# batch of n real rows runs padded to the smallest capture size above it. Up to 40 rows.
CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32, 40)
# PAD-ROWS: what the padding rows hold. "zeros": a zeroed buffer; "stale": a previous step's rows (here
# the real rows again, shuffled); "huge": finite values whose squares and exponentials overflow;
# "nan": NaN and infinities (the buffer never written, PAD-UNINIT's poison).
FILLS = ("zeros", "stale", "huge", "nan")


def padded_size(real: int) -> int:
    """The capture size a batch of ``real`` rows runs at: the smallest above it (at least one row
    of padding, so a property never draws an unpadded batch), or ``real + 8`` past the largest."""
    return next((size for size in CAPTURE_SIZES if size > real), real + 8)


def fill_rows(like: torch.Tensor, rows: int, fill: str, seed: int) -> torch.Tensor:
    """``rows`` padding rows shaped as ``like``'s rows, of its dtype and device, holding ``fill``."""
    shape = (rows, *like.shape[1:])
    gen = torch.Generator().manual_seed(seed)
    if fill == "zeros":
        out = torch.zeros(shape, dtype=torch.float64)
    elif fill == "stale":
        picks = torch.randint(like.shape[0], (rows,), generator=gen)
        return like[picks.to(like.device)].clone()
    elif fill == "huge":
        big = torch.finfo(like.dtype).max / 4  # finite; squares, sums and exponentials overflow
        out = torch.randn(shape, generator=gen, dtype=torch.float64).sign() * big
    elif fill == "nan":
        out = torch.randn(shape, generator=gen, dtype=torch.float64)
        out[torch.rand(shape, generator=gen) < 0.5] = float("nan")
        out[torch.rand(shape, generator=gen) < 0.2] = float("inf")
    else:
        raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
    return out.to(like.dtype).to(like.device)


@dataclass(frozen=True)
class RowPadding:
    """``rows`` padding rows after the real ones, holding ``fill`` (from ``seed``)."""

    rows: int
    fill: str
    seed: int

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` (rows on dim 0) with the padding rows appended; a fresh contiguous tensor."""
        return torch.cat([t, fill_rows(t, self.rows, self.fill, self.seed)])

    def describe(self) -> str:
        return f"{self.rows} padding rows ({self.fill})"


@st.composite
def row_paddings(draw, real: int, *, fills=FILLS) -> RowPadding:
    """Padding of a batch of ``real`` rows up to its capture size, or by 1 to 3 rows."""
    to_capture = padded_size(real) - real
    rows = draw(st.sampled_from((to_capture, 1, 2, 3)), label="padding_rows")
    return RowPadding(rows=rows, fill=draw(st.sampled_from(fills), label="fill"), seed=draw(seeds()))


# PAD-SERVE: a padded request's block-table row. "null": every entry the reserved null block (vLLM
# fills padded rows with NULL_BLOCK_ID 0; sglang's padded requests index the dummy row 0 of
# req_to_token, all slot 0); "stale": the null block first, then a finished request's block ids.
TABLE_ROWS = ("null", "stale")
# PAD-SERVE: what the null block holds: zeros (vLLM allocates its caches zeroed and never writes the
# null block), random keys (sglang writes its padded tokens there), or huge finite ones. NaN there is
# PAD-SERVE-NAN's (SHOULD).
NULL_FILLS = ("zeros", "random", "huge")


@dataclass(frozen=True)
class ServePadding:
    """``requests`` padded requests after the real ones, each one query at position 0 of a sequence
    of length 1 (sglang's seq_len fill value 1), its query row holding ``q_fill``; or, ``empty``,
    each of zero queries and length 0 (vLLM's form, PAD-SERVE-EMPTY: no query row). The null block
    (block 0, read by no real sequence) holds ``null_fill``; block-table rows of ``table`` kind."""

    requests: int
    q_fill: str
    null_fill: str
    table: str
    seed: int
    empty: bool = False

    @property
    def rows(self) -> int:
        """The query rows the padded requests add."""
        return 0 if self.empty else self.requests

    def describe(self) -> str:
        if self.empty:
            return (
                f"{self.requests} zero-length padded requests (null block {self.null_fill}, "
                f"table rows {self.table})"
            )
        return (
            f"{self.requests} padded requests (query {self.q_fill}, null block {self.null_fill}, "
            f"table rows {self.table})"
        )


@st.composite
def serve_paddings(draw, real: int, *, null_fills=NULL_FILLS, empty: bool = False) -> ServePadding:
    """Padded requests bringing ``real`` requests up to their capture size, or 1 to 3 more."""
    requests = draw(st.sampled_from((padded_size(real) - real, 1, 2, 3)), label="padded_requests")
    return ServePadding(
        requests=requests,
        q_fill="none" if empty else draw(st.sampled_from(FILLS), label="q_fill"),
        null_fill=draw(st.sampled_from(null_fills), label="null_fill"),
        table=draw(st.sampled_from(TABLE_ROWS), label="table_rows"),
        seed=draw(seeds()),
        empty=empty,
    )

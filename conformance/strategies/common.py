"""Pieces every family's strategies share."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

# The dtypes every family tests (inputs, attention q/k/v, scheduler model dtype).
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def seeds(bits: int = 31):
    """A generator seed in 0..2**bits - 1."""
    return st.integers(0, 2**bits - 1)


def strided_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view: every other element of a buffer twice as long in
    the last dim (inputs may have any strides: MASK-ENC, MASK-SWA-DECODE, ATTN-LAYOUT-META,
    SERVE-LAYOUT). Made on ``t``'s device: moving a view to another device makes it contiguous."""
    return torch.stack([t, torch.zeros_like(t)], dim=-1)[..., 0]


def row_strided_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as the leading columns of a buffer one column wider: rows strided, the last
    dim contiguous (a block table sliced from a preallocated [max_seqs, max_blocks] one: SERVE-LAYOUT)."""
    return torch.cat([t, t[..., :1]], dim=-1)[..., : t.shape[-1]]


# --- model profiles (spec/models.md, MODEL-RUN) ---------------------------------------------------
# key -> the values a model profile fixes (one per layer kind), set once per process by the plugin
# in a run given --opconform-model; empty otherwise, and then every strategy is the generic one.
_PINNED: dict[str, tuple] = {}


def pin_model(pins: dict[str, tuple]) -> None:
    """Fix the strategies' model parameters for this process (``conformance.harness.model_profile``)."""
    _PINNED.clear()
    _PINNED.update({key: tuple(values) for key, values in pins.items()})


def pinned_table() -> dict[str, tuple]:
    """A copy of this process's pins (to restore after a backend's own, MODEL-BACKEND)."""
    return dict(_PINNED)


def pinned_values(key: str, *, present: bool = False) -> tuple | None:
    """The profile's values of ``key`` (without None when ``present``), or None when not pinned
    (no profile, the key not fixed by it, or nothing left)."""
    values = _PINNED.get(key)
    if values is not None and present:
        values = tuple(v for v in values if v is not None)
    return values or None


def dims_fit(key_dim: int, value_dim: int, dims) -> bool:
    """Whether a model's (Dk, Dv) is of a kind the property's ``dims`` draws (equal, or not)."""
    return any((dk != dv) == (key_dim != value_dim) for dk, dv in dims)


def pinned(key: str, default, *, present: bool = False):
    """MODEL-RUN: the strategy for a parameter a model profile fixes: its values (``st.just`` of one,
    ``sampled_from`` of one per layer kind) in a profile run; ``default`` itself otherwise."""
    values = pinned_values(key, present=present)
    if values is None:
        return default
    return st.just(values[0]) if len(values) == 1 else st.sampled_from(values)


@st.composite
def _pinned_when_drawn(draw, key: str, default, present: bool):
    return draw(pinned(key, default, present=present))


def pinned_draw(key: str, default, *, present: bool = False):
    """``pinned``, decided when an example is drawn rather than when the strategy is built: for a
    strategy built at import (a ``@given`` argument), so that pins set later reach it too (a
    backend's own model, MODEL-BACKEND; the pin self-test). Unpinned, it draws ``default``'s values
    choice for choice (the generic examples are unchanged)."""
    return _pinned_when_drawn(key, default, present)

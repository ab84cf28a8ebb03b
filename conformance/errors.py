"""``ConformanceError``: a backend broke a clause. Torch-free, so that loading the plugin in a
pytest run that never collects the suite imports no torch (conformance.checks re-exports it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class ConformanceError(AssertionError):
    """A backend broke a clause. ``clause`` is the clause ID; the message starts with it.

    The other attributes are the structured facts the results report records: for numeric
    comparisons, the dtype and the largest absolute/relative error (the plugin adds the rerun
    command to the report, conformance.rerun).
    """

    def __init__(
        self,
        clause: str,
        message: str,
        *,
        dtype: torch.dtype | None = None,
        max_abs_error: float | None = None,
        max_rel_error: float | None = None,
        violation: dict | None = None,
    ):
        super().__init__(f"[{clause}] {message}")
        self.clause = clause
        self.dtype = dtype
        self.max_abs_error = max_abs_error
        self.max_rel_error = max_rel_error
        # The worst element of a numeric comparison (index, got, expected, abs/rel error, allowed):
        # the results record's ``largest_violation``.
        self.violation = violation

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
        relation: str | None = None,
        metamorphic: bool = False,
        statistics: tuple[str, dict] | None = None,
    ):
        super().__init__(f"[{clause}] {message}")
        self.clause = clause
        self.dtype = dtype
        self.max_abs_error = max_abs_error
        self.max_rel_error = max_rel_error
        # The worst element of a numeric comparison (index, got, expected, abs/rel error, allowed):
        # the results record's ``largest_violation``.
        self.violation = violation
        # The decisive relation that broke, values first ("got 0.5, expected 1 at (3,)", "weights
        # sum to 1.000, expected routed_scaling_factor 2.5"): what the streamed line leads with.
        self.relation = relation
        # The comparison was the backend against its own other result, not against the oracle.
        self.metamorphic = metamorphic
        # (output dtype, conformance.statistics.compute's dict) of a failing comparison against the
        # oracle: msprobe's statistics, reported beside the verdict (TOL-STATISTICS).
        self.statistics = statistics


def exceptions_under(exc: BaseException | None):
    """``exc`` and, through exception groups, causes and contexts, every exception under it
    (breadth first, each once)."""
    seen, stack = set(), [exc]
    while stack:
        current = stack.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(getattr(current, "exceptions", ()))
        stack.extend([current.__cause__, current.__context__])


def conformance_error(exc: BaseException | None) -> ConformanceError | None:
    """The first ConformanceError in ``exc``, its exception groups, causes and contexts."""
    return next((e for e in exceptions_under(exc) if isinstance(e, ConformanceError)), None)

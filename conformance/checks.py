"""Assertions whose failure messages say everything needed to act on them.

A failure names the clause, op, backend, device, dtype and shape, the largest absolute and
relative error with their positions, and one command line that reruns just that case.
"""

from __future__ import annotations

import re

import torch

from conformance import statistics
from conformance.errors import ConformanceError
from conformance.returns import ReturnedNone
from conformance.tolerances import Tolerance, both_sides, tolerance


def _returned(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}, dtype {value.dtype} on {value.device}"
    return f"a {type(value).__name__} ({value!r:.60})"


def check_output(
    actual, expected: torch.Tensor, *, clause: str, context: str, dtype=None, device=None
) -> None:
    """``actual`` is a tensor with data (not meta), on ``device``'s type and of ``dtype`` when
    they are given; else ``clause`` fails saying what was returned and what was expected. (The
    device is not implied: some outputs, like a scheduler's sigmas, live on the CPU by design.)"""
    __tracebackhide__ = True  # a failure shows its verdict, not this source
    device_type = getattr(device, "type", device)
    want = f"a tensor of shape {tuple(expected.shape)}"
    if dtype is not None:
        want += f", dtype {dtype}"
    if device_type is not None:
        want += f" on {device_type}"
    if not isinstance(actual, torch.Tensor):
        raise ConformanceError(clause, f"{context}: returned {_returned(actual)}; expected {want}")
    wrong_device = device_type is not None and actual.device.type != device_type
    if actual.is_meta or wrong_device or (dtype is not None and actual.dtype != dtype):
        meta = "a meta tensor (no data): " if actual.is_meta else ""
        raise ConformanceError(
            clause, f"{context}: returned {meta}{_returned(actual)}; expected {want}", dtype=actual.dtype
        )


def describe(backend, device, op: str, **inputs) -> str:
    parts = [f"{op} on backend {backend.name!r} @ {device}"]
    parts += [f"{key}={value!r}" for key, value in inputs.items()]
    return ", ".join(parts)


def _index(flat_index: int, shape) -> tuple:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), tuple(shape))) if shape else ()


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    clause: str,
    context: str,
    family: str | None = None,
    tol: Tolerance | None = None,
    atol_scale: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    expected_as: str = "expected",
) -> None:
    """|actual - expected| <= atol * atol_scale + rtol*|expected| elementwise, NaN only where
    expected is NaN.

    ``expected`` is the float64 oracle; the tolerance comes from the table for ``family`` and
    actual's dtype unless ``tol`` is given. ``atol_scale`` (default 1, broadcast) scales the
    absolute term per element where the spec says the absolute error is amplified (e.g. by the
    ``up`` factor of a gated activation, spec/tolerances.md). ``actual`` that is not a tensor
    (None, a list), a meta tensor, or, when ``device`` / ``dtype`` are given, a tensor on another
    device type or of another dtype fails ``clause`` saying what was returned (check_output).
    ``expected_as`` names ``expected`` in the message: a metamorphic clause compares two results of
    the backend itself, so its "expected" is, e.g., the backend's ``one-shot result``. Naming it
    makes the comparison metamorphic: both sides are the backend's own rounded results, so the
    tolerance allows both sides' rounding (``both_sides``, spec/tolerances.md TOL-TABLE), here and only
    here for every metamorphic comparison of the suite.
    """
    __tracebackhide__ = True  # a failure shows its verdict, not this source
    check_output(actual, expected, clause=clause, context=context, dtype=dtype, device=device)
    if tol is None:
        tol = tolerance(family, actual.dtype)
    metamorphic = expected_as != "expected"
    if metamorphic:
        tol = both_sides(tol)
    if tuple(actual.shape) != tuple(expected.shape):
        raise ConformanceError(
            clause,
            f"{context}: output shape {tuple(actual.shape)}, expected {tuple(expected.shape)}",
            dtype=actual.dtype,
        )
    got = actual.detach().to("cpu", torch.float64)
    want = expected.detach().to("cpu", torch.float64)
    nan_mismatch = torch.isnan(got) != torch.isnan(want)
    inf_mismatch = torch.isinf(want) & (got != want)
    finite = torch.isfinite(want) & torch.isfinite(got)
    abs_err = torch.where(finite, (got - want).abs(), torch.zeros_like(got))
    atol = tol.atol if atol_scale is None else tol.atol * atol_scale.detach().to("cpu", torch.float64)
    allowed = atol + tol.rtol * want.abs()
    nonfinite_bad = nan_mismatch | inf_mismatch | (torch.isfinite(want) & ~torch.isfinite(got))
    bad = nonfinite_bad | (finite & (abs_err > allowed))
    failed = bool(bad.any())
    # TOL-STATISTICS: msprobe's statistics of a comparison against the oracle, reported beside the
    # verdict (a failure's, and a running case's for its record), never judged.
    stats = None
    if not metamorphic and (failed or statistics.active()):
        stats = statistics.compute(got, want, dtype=actual.dtype)
        statistics.note(actual.dtype, stats, got.numel())
    if not failed:
        return
    rel_err = abs_err / want.abs().clamp_min(torch.finfo(torch.float64).tiny)
    lines = [
        f"{context}: {int(bad.sum())} of {bad.numel()} elements outside tolerance "
        f"(dtype {actual.dtype}, shape {tuple(actual.shape)}, rtol {tol.rtol:g}, atol {tol.atol:g}"
        + (", both sides' rounding)" if metamorphic else ")")
    ]
    if bool(nan_mismatch.any()):
        where = _index(int(nan_mismatch.flatten().nonzero()[0]), got.shape)
        lines.append(
            f"  NaN mismatch at index {where}: got {got[where].item()!r}, "
            f"{expected_as} {want[where].item()!r}"
        )
    # The largest violation is a violating element: a NaN or inf mismatch (an unbounded error) first,
    # never a position where both are NaN (its 0 / NaN excess would win argmax).
    excess = torch.where(finite, abs_err / allowed.expand_as(abs_err), torch.zeros_like(abs_err))
    excess = torch.where(nonfinite_bad, torch.full_like(excess, float("inf")), excess)
    excess = torch.where(bad, excess, torch.full_like(excess, -1.0)).flatten()
    worst_excess = int(excess.argmax())
    minus_one = torch.full_like(abs_err, -1.0)
    worst_abs = int(torch.where(finite, abs_err, minus_one).flatten().argmax())
    worst_rel = int(torch.where(finite, rel_err, minus_one).flatten().argmax())
    allowed_flat = allowed.expand_as(abs_err).flatten()
    index, unbounded = _index(worst_excess, got.shape), bool(nonfinite_bad.flatten()[worst_excess])
    violation = {"index": list(index), "got": got[index].item(), "expected": want[index].item()}
    violation["abs_error"] = None if unbounded else abs_err[index].item()  # None: a NaN/inf mismatch
    violation["rel_error"] = None if unbounded else rel_err[index].item()
    violation["allowed"] = allowed_flat[worst_excess].item()
    for label, flat in (("violation", worst_excess), ("abs error", worst_abs), ("rel error", worst_rel)):
        if label != "violation" and _index(flat, got.shape) == index:
            continue  # the same element as the largest violation: shown once
        where = _index(flat, got.shape)
        if bool(nonfinite_bad.flatten()[flat]):
            error = "a NaN or inf mismatch"
        else:
            error = f"abs {abs_err.flatten()[flat].item():.3g}, rel {rel_err.flatten()[flat].item():.3g}"
        lines.append(
            f"  largest {label} at index {where}: {error}, allowed {allowed_flat[flat].item():.3g}; "
            f"got {got[where].item()!r}, {expected_as} {want[where].item()!r}"
        )
    raise ConformanceError(
        clause,
        "\n".join(lines),
        dtype=actual.dtype,
        # A NaN/inf where a number was expected is an unbounded error (for declared deviations).
        max_abs_error=float("inf") if bool(nonfinite_bad.any()) else abs_err.flatten()[worst_abs].item(),
        max_rel_error=rel_err.flatten()[worst_rel].item(),
        violation=violation,
        relation=_relation(violation, expected_as),
        metamorphic=metamorphic,
        statistics=None if stats is None else (str(actual.dtype).removeprefix("torch."), stats),
    )


def _relation(violation: dict, expected_as: str) -> str:
    """``got -1.08939, expected -1.08937 at (0,)``: the largest violation, values first."""
    got, want = _distinct(violation["got"], violation["expected"])
    return f"got {got}, {expected_as} {want} at {tuple(violation['index'])}"


def _distinct(got: float, want: float) -> tuple[str, str]:
    """Two values as a one-line verdict shows them: 4 significant digits, more until they differ
    (got -1.08939, expected -1.08937; the record keeps each repr)."""
    for digits in range(4, 18):
        shown = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if shown[0] != shown[1] or got == want or got != got or want != want:
            return shown
    return repr(got), repr(want)


def check(condition: bool, *, clause: str, message: str, relation: str | None = None) -> None:
    """Fail with ``clause`` named unless ``condition`` holds. ``relation`` is the decisive part of
    ``message``, values first (what broke: "weights sum to 1.000, expected 2.5"), which the streamed
    line leads with."""
    __tracebackhide__ = True  # a failure shows its verdict, not this source
    if not condition:
        raise ConformanceError(clause, message, relation=relation)


def check_raises(
    exception: type[BaseException], call, *, clause: str, context: str, match: str | None = None
) -> None:
    """``call()`` must raise ``exception`` whose message matches the regex ``match`` (when given:
    e.g. the argument's name); another exception type, a message that does not match, or no
    exception fails ``clause``."""
    __tracebackhide__ = True  # a failure shows its verdict, not this source
    try:
        call()
    except ReturnedNone:  # the op returned (None): it accepted the input
        pass
    except exception as exc:
        if match is None or re.search(match, str(exc)):
            return
        relation = f"raised {type(exc).__name__} not naming the argument (regex {match!r})"
        raise ConformanceError(
            clause,
            f"{context}: raised {type(exc).__name__}: {exc}; expected the message to name the "
            f"argument (regex {match!r})",
            relation=relation,
        ) from exc
    except Exception as exc:  # noqa: BLE001 - the wrong type is itself the finding
        relation = f"raised {type(exc).__name__}, expected {exception.__name__}"
        raise ConformanceError(
            clause,
            f"{context}: raised {type(exc).__name__}: {exc}; expected {exception.__name__}",
            relation=relation,
        ) from exc
    raise ConformanceError(clause, f"{context}: accepted bad input; expected {exception.__name__}",
                           relation=f"accepted bad input, expected {exception.__name__}")  # fmt: skip

"""Stopping early: ``--opconform-backend-maxfail N`` and ``--opconform-first-failure``.

- ``--opconform-backend-maxfail N``: after N failed cases of one backend, its remaining cases are
  skipped with that reason. For runs that only need to know whether (and by which clause) a
  backend fails, such as the mutant self-tests (N = 1).
- ``--opconform-first-failure`` (``opconform run --first-failure``): after the first failed case
  of a clause on a backend and device, the remaining cases of that backend and device whose
  clauses have all failed there are skipped with that reason; every other clause still runs, so
  each broken clause is reported once. The run completes (exit 1 on a failure, not pytest's
  "interrupted" of ``-x``).

Both may be given; a case is skipped when either says so. Counted per process (under xdist, per
worker: with several workers a clause may fail once per worker).
"""

from __future__ import annotations

import pytest

from conformance.results import Outcome

FAILURES = pytest.StashKey[dict]()
BROKEN = pytest.StashKey[set]()  # (backend, device, clause) that failed, for --opconform-first-failure
INFO, CASE = "opconform", "opconform_case"  # recorder's user_properties keys (conformance.harness.recorder)


def note(config, backend, report) -> None:
    """Count a failed call of ``backend`` (a SHOULD failure counts only under --opconform-strict,
    where it fails the run), and remember the clause it broke on its device, at either level."""
    properties = dict(report.user_properties)
    facts = properties.get(CASE) or {}
    should = facts.get("outcome") == Outcome.SHOULD_FAILED.value
    if not (report.when == "call" and (report.failed or should) and backend is not None):
        return
    if report.failed:
        counts = config.stash.setdefault(FAILURES, {})
        counts[backend.name] = counts.get(backend.name, 0) + 1
    clause = facts.get("failure", {}).get("clause")
    if clause:
        device = (properties.get(INFO) or {}).get("device")
        config.stash.setdefault(BROKEN, set()).add((backend.name, device, clause))


def skip_reason(config, backend) -> str | None:
    """Why ``backend``'s next case is skipped by --opconform-backend-maxfail, or None."""
    limit = config.getoption("opconform_backend_maxfail", None)
    failed = config.stash.get(FAILURES, {}).get(backend.name, 0)
    if limit and failed >= limit:
        return (
            f"backend {backend.name!r} already failed {failed} case(s) (--opconform-backend-maxfail={limit})"
        )
    return None


def clause_skip_reason(item) -> str | None:
    """Why ``item`` is skipped by --opconform-first-failure: every clause it checks already failed
    on its backend and device in this process; else None."""
    config = item.config
    if not config.getoption("opconform_first_failure", False):
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    backend = getattr(params.get("backend"), "name", None)
    device = getattr(params.get("device"), "type", None)
    clauses = [c for mark in item.iter_markers("clause") for c in mark.args]
    broken = config.stash.get(BROKEN, set())
    if backend is None or not clauses or not all((backend, device, c) in broken for c in clauses):
        return None
    where = f"backend {backend!r}" + (f" on {device}" if device else "")
    return f"{', '.join(dict.fromkeys(clauses))} already failed for {where} (--opconform-first-failure)"

"""``--opconform-backend-maxfail N``: after N failed cases of one backend, its remaining cases are
skipped with that reason. For runs that only need to know whether (and by which clause) a backend
fails, such as the mutant self-tests, and for a user who wants the first broken clause fast.

Counted per process (under xdist, per worker).
"""

from __future__ import annotations

import pytest

FAILURES = pytest.StashKey[dict]()


def note(config, backend, report) -> None:
    """Count a failed call of ``backend``."""
    if report.when == "call" and report.failed and backend is not None:
        counts = config.stash.setdefault(FAILURES, {})
        counts[backend.name] = counts.get(backend.name, 0) + 1


def skip_reason(config, backend) -> str | None:
    """Why ``backend``'s next case is skipped, or None."""
    limit = config.getoption("opconform_backend_maxfail", None)
    failed = config.stash.get(FAILURES, {}).get(backend.name, 0)
    if limit and failed >= limit:
        return (
            f"backend {backend.name!r} already failed {failed} case(s) (--opconform-backend-maxfail={limit})"
        )
    return None

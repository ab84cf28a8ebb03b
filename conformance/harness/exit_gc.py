"""The garbage collection that ends a suite run: one full collection instead of pytest's five.

At exit pytest (its unraisable-exception plugin) runs ``gc.collect()`` five times, each over
every object the process holds: torch's modules and the collected suite, 0.15-0.4 s a
collection, about 1 CPU-s of every run (measured; the self-tests start about 55 runs). After
the session one full collection still finds every cycle (a finalizer that raises reports through
pytest's hook, still installed then), and ``gc.freeze`` moves the survivors out of the
collector's sight, so the five collections see only what is made after. The next activation in
the same process (``pytest.main`` again) thaws them first, so no later collection misses them.
"""

from __future__ import annotations

import gc

import pytest

_frozen = False


class FreezeAtExit:
    """Registered by an active run: freezes the heap once its session has finished."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        global _frozen
        gc.collect()
        gc.freeze()
        _frozen = True


def register(config) -> None:
    """Thaw what an earlier run in this process froze, and freeze again at this run's end."""
    global _frozen
    if _frozen:
        gc.unfreeze()
        _frozen = False
    config.pluginmanager.register(FreezeAtExit(), "opconform-exit-gc")

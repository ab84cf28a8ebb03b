"""conformance.harness.exit_gc: an active run freezes its heap after the session; the next
activation thaws it."""

from __future__ import annotations

import gc

from conformance.harness import exit_gc


class _Plugins:
    def __init__(self):
        self.registered = []

    def register(self, plugin, name):
        self.registered.append((name, plugin))


class _Config:
    def __init__(self):
        self.pluginmanager = _Plugins()


def test_session_end_freezes_and_next_activation_thaws():
    """After sessionfinish the survivors are frozen (pytest's five exit collections skip them); the
    next run's activation unfreezes them before registering its own hook."""
    first, second = _Config(), _Config()
    try:
        exit_gc.register(first)
        [(name, plugin)] = first.pluginmanager.registered
        assert name == "opconform-exit-gc" and gc.get_freeze_count() == 0
        plugin.pytest_sessionfinish(session=None)
        assert gc.get_freeze_count() > 0
        exit_gc.register(second)
        assert gc.get_freeze_count() == 0 and len(second.pluginmanager.registered) == 1
    finally:
        gc.unfreeze()
        exit_gc._frozen = False


def test_a_cycle_made_before_the_session_ended_is_still_collected():
    """The one full collection before the freeze finds garbage cycles (the five would have)."""
    import weakref

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    del a, b
    try:
        exit_gc.FreezeAtExit().pytest_sessionfinish(session=None)
        assert alive() is None
    finally:
        gc.unfreeze()
        exit_gc._frozen = False

"""A backend whose ``unavailable`` raises (a driver query that fails): one usage line naming it,
before any case runs (tests/test_plugin.py)."""

from backends.native import NativeBackend


class RaisingUnavailable(NativeBackend):
    name = "raising-unavailable"

    def unavailable(self, device):
        raise RuntimeError("driver not initialised")


BACKEND = RaisingUnavailable()

"""Backends for tests/test_replay_verdicts.py, loaded by ``opconform replay --backend MODULE:ATTR``
as a user's would be: one that lacks an op, one whose ``unavailable`` raises, one whose kernel is
wrong (erf GELU where ``new_gelu`` is the tanh form)."""

from __future__ import annotations

import torch.nn.functional as F


class GeluOnly:
    """Implements new_gelu (right) and nothing else: every other op is not implemented."""

    name = "gelu-only"

    def unavailable(self, device):
        return None

    def new_gelu(self, x):
        return F.gelu(x, approximate="tanh")


class BrokenProbe(GeluOnly):
    """Its availability check itself raises (a driver handle never set up)."""

    name = "broken-probe"

    def unavailable(self, device):
        raise AttributeError("'NoneType' object has no attribute 'device_count'")


class ErfGelu(GeluOnly):
    name = "erf-gelu"

    def new_gelu(self, x):
        return F.gelu(x)


GELU_ONLY, BROKEN_PROBE, ERF_GELU = GeluOnly(), BrokenProbe(), ErfGelu()

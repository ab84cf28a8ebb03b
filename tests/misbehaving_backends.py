"""Backends that misbehave in one op each (loaded with --backend-module, like a user's), for
tests/test_misbehaving_backends.py: every other op is absent, so it costs only its own cells.

``TIMING`` (hang, slow) run in a run of their own with a short per-case limit; they block for
ever or for 1000 s, so the limit stops them however fast or loaded the machine is. ``ALL`` (the
others) run under the suite's default limit, which none of them comes near: no outcome here
depends on the machine's speed (issue 18, item 18: a 2 s limit timed out 'raises' at load 5)."""

from __future__ import annotations

import os
import time

import torch

from backends.native import NativeBackend

RMS_NORM = NativeBackend.rms_norm
SILU_AND_MUL = NativeBackend.silu_and_mul
GELU_AND_MUL = NativeBackend.gelu_and_mul
SILU_CLAMPED_AND_MUL = NativeBackend.silu_clamped_and_mul


class OneOp:
    """Available everywhere; implements only the op a subclass defines."""

    name = "one-op"

    def unavailable(self, device):
        return None


class Abort(OneOp):
    name = "abort"

    def rms_norm(self, x, weight, *, eps):
        os.abort()


class Hang(OneOp):
    name = "hang"

    def rms_norm(self, x, weight, *, eps):
        while True:
            time.sleep(3600)


class Slow(OneOp):
    """Sleeps far past any short per-case limit (1000 s) on its first call in a process, then is
    the native op."""

    name = "slow"
    slept = False

    def rms_norm(self, x, weight, *, eps):
        if not Slow.slept:
            Slow.slept = True
            time.sleep(1000)
        return RMS_NORM(x, weight, eps=eps)


class Raises(OneOp):
    name = "raises"

    def rms_norm(self, x, weight, *, eps):
        raise RuntimeError("kernel launch failed")


class ReturnsNone(OneOp):
    name = "returns-none"

    def rms_norm(self, x, weight, *, eps):
        return None


class ReturnsList(OneOp):
    name = "returns-list"

    def rms_norm(self, x, weight, *, eps):
        return RMS_NORM(x, weight, eps=eps).tolist()


class ReturnsMeta(OneOp):
    name = "returns-meta"

    def rms_norm(self, x, weight, *, eps):
        return torch.empty_like(x, device="meta")


class WrongDtype(OneOp):
    """The right values, computed and returned in float64 whatever x's dtype."""

    name = "wrong-dtype"

    def rms_norm(self, x, weight, *, eps):
        return RMS_NORM(x.double(), weight.double(), eps=eps)


class WrongDtypeActivations(OneOp):
    """The right values of three gated activations, computed and returned in float64 whatever
    x's dtype (not in ALL: tests/test_clause_demands.py runs it on their matches-oracle properties)."""

    name = "wrong-dtype-activations"

    def gelu_and_mul(self, x, *, approximate):
        return GELU_AND_MUL(x.double(), approximate=approximate)

    def silu_and_mul(self, x):
        return SILU_AND_MUL(x.double())

    def silu_clamped_and_mul(self, x, *, limit):
        return SILU_CLAMPED_AND_MUL(x.double(), limit=limit)


class Aliasing(OneOp):
    """The right values, written into x's gate half and returned as a view of x."""

    name = "aliasing"

    def silu_and_mul(self, x):
        d = x.shape[-1] // 2
        out = x[..., :d]
        out.copy_(SILU_AND_MUL(x))
        return out


TIMING = [Hang(), Slow()]
ALL = [Abort(), Raises(), ReturnsNone(), ReturnsList(), ReturnsMeta(), WrongDtype(), Aliasing()]
WRONG_DTYPE_ACTIVATIONS = WrongDtypeActivations()

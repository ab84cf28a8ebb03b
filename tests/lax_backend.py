"""A correct RMSNorm that validates nothing, as the field's production layers are written, for the
level self-test (tests/test_levels.py); loaded like a user's module (``--backend-module
lax_backend``, with tests/ on the path).

Its numbers are right: float32 compute, ``eps`` inside the root, the weight multiplied in float32
and the product cast once to x's dtype (sglang's ``RMSNorm.forward_native``, one of the two orders
NORM-RMS accepts). It checks no argument, so NORM-ERRORS, a SHOULD clause, fails on most bad
inputs; no MUST clause may.
"""

from __future__ import annotations

import torch

from backends.native import NativeBackend


class LaxNorm(NativeBackend):
    name = "lax"

    def rms_norm(self, x, weight, *, eps):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (h * weight.to(torch.float32)).to(x.dtype)


BACKEND = LaxNorm()

"""External backends for the report self-tests (loaded with --backend-module, like a user's)."""

from __future__ import annotations

from backends.native import NativeBackend, gelu_and_mul


class Deviating(NativeBackend):
    """GEGLU with a relative error of 1e-4: outside float32's tolerance, inside float16's and
    bfloat16's; SwiGLU and the clamped step are the native ones."""

    name = "deviating"

    def gelu_and_mul(self, x, *, approximate):
        return gelu_and_mul(x, approximate=approximate) * (1 + 1e-4)


BACKEND = Deviating()

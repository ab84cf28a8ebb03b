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


class Accepting(Deviating):
    """Deviating's GEGLU that also takes any ``approximate`` (anything but "tanh" is the erf
    GELU): a conformance failure (ACT-GEGLU) and a bad-input failure (ACT-ERRORS) of one op."""

    name = "accepting"

    def gelu_and_mul(self, x, *, approximate):
        return super().gelu_and_mul(x, approximate="tanh" if approximate == "tanh" else "none")


def _launch(kernel: str):
    raise RuntimeError(f"{kernel}: no kernel image for this device")


class Raising(NativeBackend):
    """A SwiGLU kernel that raises its own error (from a helper, as a launcher would)."""

    name = "raising"

    def silu_and_mul(self, x):
        return _launch("silu_and_mul")


BROKEN = [Accepting(), Raising()]

"""Device discovery: which of cpu, cuda and npu are present. torch_npu is imported in a guard;
torch itself only when a device is asked about (the plugin imports this module in every run)."""

from __future__ import annotations

import functools
import importlib

KNOWN_DEVICE_TYPES = ("cpu", "cuda", "npu")


@functools.cache
def absent_reason(device_type: str) -> str | None:
    """``None`` when a device of this type is present, else why not (used as a skip reason)."""
    if device_type == "cpu":
        return None
    import torch

    if device_type == "cuda":
        return None if torch.cuda.is_available() else "no CUDA device is present"
    if device_type == "npu":
        try:
            importlib.import_module("torch_npu")
        except Exception:
            return "torch_npu is not installed or failed to import, so no NPU is usable"
        return None if torch.npu.is_available() else "torch_npu imported but no NPU is present"
    return f"unknown device type {device_type!r}; expected one of {KNOWN_DEVICE_TYPES}"


def present_devices() -> list[str]:
    return [name for name in KNOWN_DEVICE_TYPES if absent_reason(name) is None]


class AbsentDevice:
    """Stands for a device type torch cannot even name here (``torch.device("npu")`` raises
    without torch_npu), so its cases are still collected and skip at setup with the reason."""

    def __init__(self, device_type: str):
        self.type = device_type
        self.index = None

    def __repr__(self) -> str:
        return f"device(type={self.type!r})"

    def __str__(self) -> str:
        return self.type


def as_device(device_type: str):
    """``torch.device(device_type)``, or an ``AbsentDevice`` when torch does not know the type."""
    import torch

    try:
        return torch.device(device_type)
    except RuntimeError:
        return AbsentDevice(device_type)

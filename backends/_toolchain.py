"""Whether torch.compile can generate code for a device here (shared by the compiled backends)."""

from __future__ import annotations

import importlib.util
import os
import shutil

import torch


def compile_unavailable(device: torch.device, *, what: str = "torch.compile") -> str | None:
    """``None`` when inductor has a working code generator for ``device``, else the skip reason:
    a C++ compiler on cpu, triton on cuda; other device types have none."""
    if device.type == "cpu":
        compiler = os.environ.get("CXX", "g++")
        if shutil.which(compiler) is None:
            return f"{what} on cpu needs a C++ compiler; {compiler!r} is not on PATH"
        return None
    if device.type == "cuda":
        return (
            None
            if importlib.util.find_spec("triton")
            else f"{what} on cuda needs triton, which is not installed"
        )
    return f"{what} (inductor) has no code generator for device type {device.type!r}"

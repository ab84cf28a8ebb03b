"""Capture, replay and export (docs/capture.md): record the calls a live model makes to its
kernels (``Capture``), judge them against the oracles anywhere (``opconform replay``), and write
golden cases a C++ kernel test reads without Python (``opconform export`` / ``judge``).

Torch is imported here; the CLI imports this package only for the commands that need it.
"""

from opconform.capture.recorder import Capture
from opconform.capture.store import CaptureError, read_call, read_index, suite_version

__all__ = ["Capture", "CaptureError", "read_call", "read_index", "suite_version"]

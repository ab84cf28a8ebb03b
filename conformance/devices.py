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


# --- Cards: indices into the caller's visible list (spec/devices.md, DEV-CARDS) ---------------

INDEXED_TYPES = ("cuda", "npu")  # the types whose --device takes card indices
# The runtimes' own visibility variables: an index names a position in this list, never a physical id.
VISIBLE_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}
# TEST-ONLY: "cuda=4,npu=2" stands for the runtimes' device counts, so the index checks and the
# per-worker pinning run on a host without cards; the cases still skip there as absent.
TEST_COUNT_ENV = "OPCONFORM_TEST_DEVICE_COUNT"


class DeviceError(ValueError):
    """A ``--device`` value that names no device or no visible card; the message names it."""


def parse(value: str) -> tuple[str, tuple[int, ...] | None]:
    """``--device`` VALUE as (type, card indices); indices None: every visible card (bare cuda/npu)."""
    kind, sep, rest = value.partition(":")
    if kind not in KNOWN_DEVICE_TYPES:
        raise DeviceError(f"--device {value}: unknown device type {kind!r}; expected {KNOWN_DEVICE_TYPES}")
    if not sep:
        return kind, (None if kind in INDEXED_TYPES else ())
    if kind not in INDEXED_TYPES:
        raise DeviceError(f"--device {value}: {kind} takes no card index")
    parts = rest.split(",")
    if not all(p.isdigit() for p in parts):
        raise DeviceError(f"--device {value}: card indices are whole numbers 0 or more, comma-separated")
    return kind, tuple(dict.fromkeys(int(p) for p in parts))


def _faked_counts() -> dict[str, int] | None:
    import os

    raw = os.environ.get(TEST_COUNT_ENV)
    if raw is None:
        return None
    counts = {}
    for part in filter(None, raw.split(",")):
        kind, _, number = part.partition("=")
        if kind not in INDEXED_TYPES or not number.isdigit():
            raise DeviceError(f"{TEST_COUNT_ENV}={raw}: expected TYPE=COUNT,... (TYPE: {INDEXED_TYPES})")
        counts[kind] = int(number)
    return counts


def device_count(kind: str) -> int:
    """The runtime's count of ``kind`` cards this process sees (0 when the type is absent)."""
    faked = _faked_counts()
    if faked is not None:
        return faked.get(kind, 0)
    if absent_reason(kind) is not None:
        return 0
    import torch

    return int(torch.cuda.device_count() if kind == "cuda" else torch.npu.device_count())


def visible_ids(kind: str) -> list[str]:
    """The caller's visible cards as the runtime names them: the visibility variable's entries, cut
    to the runtime's count (a container may list more cards than it exposes), else 0..count-1."""
    import os

    count = device_count(kind)
    listed = os.environ.get(VISIBLE_ENV[kind])
    if listed is None:
        return [str(i) for i in range(count)]
    return [entry.strip() for entry in listed.split(",") if entry.strip()][:count]


def cards(kind: str, indices: tuple[int, ...] | None) -> list[int]:
    """The card indices ``--device`` asks for, checked against the visible cards; an absent type
    keeps the indices asked (none for a bare type): its cases skip and the run exits 3."""
    visible = visible_ids(kind)
    if not visible:
        return list(indices or [])
    if indices is None:
        return list(range(len(visible)))
    beyond = [i for i in indices if i >= len(visible)]
    if beyond:
        variable = VISIBLE_ENV[kind]
        raise DeviceError(
            f"--device {kind}:{','.join(map(str, indices))}: no card {beyond[0]}: {len(visible)} {kind} "
            f"card(s) visible (indices 0-{len(visible) - 1} of {variable} or the runtime's count)"
        )
    return list(indices)


def card_label(kind: str, index: int) -> str:
    return f"{kind}:{index}"


def assign(workers: int, chosen: dict[str, list[int]]) -> list[dict[str, int]]:
    """Worker i's card of each indexed type: round robin over that type's chosen cards."""
    return [{kind: idx[i % len(idx)] for kind, idx in chosen.items() if idx} for i in range(workers)]


def pin_environment(assignment: dict[str, int]) -> dict[str, str]:
    """The variables that show a worker only its cards (set before the runtime initialises)."""
    return {VISIBLE_ENV[kind]: visible_ids(kind)[index] for kind, index in assignment.items()
            if index < len(visible_ids(kind))}  # fmt: skip

"""The product tuple (spec/devices.md, DEV-PRODUCT): the exact hardware and software a run's
verdicts are about, as a flat dict of strings in every results document (``meta["product"]``).
A component that is not there is "" (a CUDA host has no CANN). Read in the recorder's process
(the xdist controller) when the document is written; every probe is guarded, none may fail a run.
"""

from __future__ import annotations

import importlib
import platform
import shutil
import subprocess
import sys
from pathlib import Path

KEYS = ("chip", "driver", "cann", "cuda", "torch", "torch_npu", "python", "opconform", "commit", "host")


def _quiet(probe, default: str = "") -> str:
    try:
        value = probe()
    except Exception:  # noqa: BLE001 - a probe of someone's runtime; its absence is the answer
        return default
    return str(value).strip() if value else default


def cpu_model() -> str:
    """/proc/cpuinfo's first ``model name`` (Linux), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _command(*argv: str) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""


def _suite_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return ""
    return _command("git", "-C", str(root), "rev-parse", "--short=12", "HEAD")


def _suite_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("opconform")
    except metadata.PackageNotFoundError:
        return ""


def _cuda(card: int) -> tuple[str, str]:
    import torch

    name = torch.cuda.get_device_name(card)
    driver = _command("nvidia-smi", f"--id={card}", "--query-gpu=driver_version", "--format=csv,noheader")
    return name, driver


def _npu(card: int) -> tuple[str, str]:
    import torch

    importlib.import_module("torch_npu")
    from torch_npu.utils import get_cann_version

    return torch.npu.get_device_name(card), get_cann_version(module="DRIVER")


def _cann() -> str:
    """CANN's version as torch_npu reports it ("" before CANN 8.1.RC1, whose API lacks it)."""
    return importlib.import_module("torch_npu.utils").get_cann_version(module="CANN")


def software() -> dict[str, str]:
    """The versions a ``when`` condition reads (DEV-WHEN), without asking any card."""
    torch = sys.modules.get("torch") or importlib.import_module("torch")
    cuda_driver = _quiet(
        lambda: _command("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    )
    npu_driver = _quiet(lambda: importlib.import_module("torch_npu.utils").get_cann_version(module="DRIVER"))
    return {
        "cann": _quiet(_cann),
        "driver": npu_driver or cuda_driver,
        "cuda": _quiet(lambda: torch.version.cuda),
        "torch": torch.__version__,
        "torch_npu": _quiet(lambda: importlib.import_module("torch_npu").__version__),
        "python": platform.python_version(),
        "opconform": _quiet(_suite_version),
    }


def collect(cards: dict[str, list[int]] | None = None) -> dict[str, str]:
    """The tuple of this host; ``cards``: type -> the run's card indices (its first card's chip)."""
    from conformance.devices import absent_reason

    cards = cards or {}
    product = {**dict.fromkeys(KEYS, ""), **software()}
    chips, drivers = [], []
    for kind, probe in (("npu", _npu), ("cuda", _cuda)):
        if kind in cards and absent_reason(kind) is None:
            try:
                name, driver = probe((cards[kind] or [0])[0])
            except Exception:  # noqa: BLE001 - as _quiet
                name, driver = "", ""
            chips.append(str(name or "").strip())
            drivers.append(str(driver or "").strip())
    product["chip"] = " + ".join(c for c in chips if c) or cpu_model()
    product["driver"] = " + ".join(d for d in drivers if d) or product["driver"]
    product["commit"] = _quiet(_suite_commit)
    product["host"] = platform.node()
    return product


def line(product: dict | None) -> str:
    """The tuple as one line, its empty components left out (the report's and matrix's header)."""
    return ", ".join(f"{k} {v}" for k, v in (product or {}).items() if v)


def differing(tuples: list[dict]) -> list[str]:
    """The keys whose values differ between ``tuples`` (none: one product)."""
    keys = dict.fromkeys(k for t in tuples for k in t)
    return [k for k in keys if len({t.get(k) or "" for t in tuples}) > 1]


def label(product: dict, keys: list[str]) -> str:
    """A column's product label: the ``keys`` (those that differ between merged runs) and values."""
    return " ".join(f"{k}={product.get(k) or '-'}" for k in keys)


def changed(old: dict, new: dict) -> list[str]:
    """What differs between two tuples, one ``key: old -> new`` per key (diff)."""
    keys = [k for k in dict.fromkeys([*KEYS, *old, *new]) if (old.get(k) or "") != (new.get(k) or "")]
    return [f"{k}: {old.get(k) or '-'} -> {new.get(k) or '-'}" for k in keys]

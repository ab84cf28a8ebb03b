"""Backends: the implementations under test, behind one small protocol.

A backend is any object with

- ``name: str``, unique among the selected backends;
- ``unavailable(device: torch.device) -> str | None``: ``None`` when it can run on that
  device, otherwise the reason, which the suite reports as a skip;
- any subset of the op methods of ``OPS`` (``backends.protocols``: one ``typing.Protocol``
  per family, ``ActivationOps``, ``MaskOps``, ``AttentionOps``, ``SchedulerOps``), named like
  the oracles in ``reference/`` with the same keyword-only options (e.g.
  ``gelu_and_mul(x, *, approximate)``), defined in the class body like any method.

An op a backend lacks is reported as *not implemented*, never as a failure. A backend says so
explicitly, with its reason (shown in the skip message and reports), by assigning
``NotImplementedOp("reason")`` to the op name in its class body; this also removes an op the
class inherits::

    class MyCompiledBackend(MyBackend):
        encoder_attention_mask = NotImplementedOp("create_mask is not compiled")

An op it does not define at all is equally *not implemented*, without a reason.

Built-in backends are listed in ``BUILTIN`` as ``module:attribute`` strings and imported
lazily, so a backend whose framework is missing costs nothing until it is selected (the
einops ``_backends`` pattern). External backends come from ``--backend-module MODULE[:ATTR]``
(ATTR defaults to ``BACKEND`` and may be one backend or an iterable of them) or from the
``opconform.backends`` entry-point group (each entry point loads one backend or an iterable);
``import_attr("MODULE[:ATTR]")`` resolves such a spec.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from backends.protocols import FAMILIES, OPS

__all__ = [
    "PEERS",
    "Backend",
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "FAMILIES",
    "OPS",
    "BackendError",
    "NotImplementedOp",
    "builtin_backends",
    "check_backend",
    "entry_point_backends",
    "import_attr",
    "load_backend_module",
    "not_implemented_reason",
    "unique_by_name",
]

ENTRY_POINT_GROUP = "opconform.backends"

# name -> "module:attribute"; imported only when the backend is needed.
BUILTIN: dict[str, str] = {
    "native": "backends.native:BACKEND",
    "compiled": "backends.compiled:BACKEND",
    "npu": "backends.npu:BACKEND",
    "npu-emulated": "backends.npu:EMULATED",
    "diffusers": "backends.diffusers_scheduler:BACKEND",
    "diffusers-wrapped": "backends.diffusers_scheduler:WRAPPED",
    "flex": "backends.flex:BACKEND",
    "transformers": "backends.transformers_peer:BACKEND",
    "invariant": "backends.invariant:BACKEND",
}
# Built-in backends that run the field's own reference code, to show the suite fails none of it; they
# draw a share of the examples (conformance.harness.profiles.PEER_SHARE) except under the thorough profile.
PEERS = frozenset({"transformers"})


@runtime_checkable
class Backend(Protocol):
    name: str

    def unavailable(self, device: torch.device) -> str | None: ...


class BackendError(ValueError):
    """A backend specification that cannot be loaded or does not follow the protocol."""


class NotImplementedOp:
    """Assigned to an op name in a backend's class body: the backend lacks that op, for ``reason``.

    Not callable, so the op is absent to every caller; ``not_implemented_reason`` reports the reason.
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        if not isinstance(reason, str) or not reason:
            raise TypeError("NotImplementedOp needs a non-empty reason")
        self.reason = reason

    def __repr__(self) -> str:
        return f"NotImplementedOp({self.reason!r})"


def check_backend(obj, origin: str) -> Backend:
    """``obj`` if it has a non-empty str ``name`` and an ``unavailable`` method, else BackendError
    naming ``origin`` (where the object came from)."""
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        raise BackendError(f"{origin}: {obj!r} has no non-empty str attribute 'name'")
    if not callable(getattr(obj, "unavailable", None)):
        raise BackendError(f"{origin}: backend {name!r} has no method unavailable(device)")
    return obj


def _as_backends(obj, origin: str) -> list[Backend]:
    if isinstance(obj, (str, bytes)):
        raise BackendError(f"{origin}: expected a backend or an iterable of backends, got {obj!r}")
    if hasattr(obj, "unavailable") or hasattr(obj, "name"):
        return [check_backend(obj, origin)]
    try:
        items = list(obj)
    except TypeError:
        raise BackendError(f"{origin}: expected a backend or an iterable of backends, got {obj!r}") from None
    return [check_backend(item, origin) for item in items]


def import_attr(spec: str, default_attr: str = "BACKEND"):
    """The object named by ``MODULE[:ATTR]`` (ATTR defaults to ``default_attr``); BackendError
    when the spec is malformed, the module does not import or lacks the attribute."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise BackendError(f"backend module spec {spec!r} must look like MODULE[:ATTR]")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendError(f"cannot import backend module {module_name!r}: {exc}") from exc
    attr = attr or default_attr
    try:
        return getattr(module, attr)
    except AttributeError:
        raise BackendError(f"backend module {module_name!r} has no attribute {attr!r}") from None


def load_backend_module(spec: str) -> list[Backend]:
    """Load the backends named by ``MODULE[:ATTR]`` (ATTR defaults to ``BACKEND``)."""
    hint = file_path_hint(spec)
    if hint:
        raise BackendError(hint)
    return _as_backends(import_attr(spec), f"--backend-module {spec}")


def file_path_hint(spec: str) -> str | None:
    """The one line for a spec that names a file (``path/to/acme.py``, ``./acme``): which module name
    and folder to give instead (importlib's answer was a relative-import TypeError); else None."""
    module, sep, attr = spec.partition(":")
    if not (module.endswith(".py") or "/" in module or "\\" in module):
        if module.startswith("."):
            return f"--backend-module {spec}: a relative module name; give its full dotted name"
        return None
    path = Path(module if module.endswith(".py") else module + ".py").resolve()
    missing = "" if path.is_file() else f" (there is no {path})"
    folder = path.parent
    return (
        f"--backend-module {spec}: expected a module name, not a file path{missing}: give "
        f"--backend-module {path.stem}{sep}{attr} and run from {folder} (or set PYTHONPATH={folder})"
    )


def builtin_backends() -> list[Backend]:
    """The built-in backends, in ``BUILTIN`` order."""
    return [check_backend(import_attr(target), f"built-in {name}") for name, target in BUILTIN.items()]


def entry_point_backends() -> list[Backend]:
    """Backends registered by installed packages under the ``opconform.backends`` group."""
    found: list[Backend] = []
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.extend(_as_backends(entry_point.load(), f"entry point {entry_point.name}"))
    return found


def not_implemented_reason(backend: Backend, op: str) -> str | None:
    """``None`` when ``backend`` has op method ``op``, else the reason used in reports: "not
    implemented: ...", with the backend's own reason when it declares the op a NotImplementedOp."""
    if op not in OPS:
        raise KeyError(f"unknown op {op!r}; known ops: {sorted(OPS)}")
    method = getattr(backend, op, None)
    if isinstance(method, NotImplementedOp):
        return f"not implemented: backend {backend.name!r} has no op {op!r}: {method.reason}"
    if callable(method):
        return None
    return f"not implemented: backend {backend.name!r} has no op {op!r}"


def unique_by_name(backends: Iterable[Backend]) -> list[Backend]:
    """Keep the first backend of each name; two different objects with one name are an error."""
    chosen: dict[str, Backend] = {}
    for backend in backends:
        previous = chosen.get(backend.name)
        if previous is None:
            chosen[backend.name] = backend
        elif previous is not backend:
            raise BackendError(f"two different backends are named {backend.name!r}")
    return list(chosen.values())

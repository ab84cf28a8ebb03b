"""A backend op that returns None where its protocol promises a value fails its case as that.

Without this, the None reached the property's next step and the case failed with the suite's own
``AttributeError: 'NoneType' object has no attribute 'dtype'``, which reads as a bug of the
suite. During a suite case's call, ``checked(item)`` hands the property a ``ReturnChecked`` view
of the backend: every attribute is the backend's own, and each op whose protocol return
annotation admits no None (``backends.protocols``; ``write_kv_cache`` writes in place and
returns None, ``swiglu_limit`` may) raises ``ReturnedNone`` (a ConformanceError of the case's
first clause) the moment it returns None:
``[NORM-DTYPE] rms_norm on backend 'mine' @ cpu: rms_norm returned None; NormOps.rms_norm returns
torch.Tensor``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect

from conformance.errors import ConformanceError


class ReturnedNone(ConformanceError):
    """An op returned None where its protocol promises a value."""


@functools.cache
def promised(op: str) -> str | None:
    """``Protocol.op returns ANNOTATION`` when ``op``'s protocol return annotation admits no None;
    None for an op that may return None, or that is no op of the table."""
    from backends.protocols import FAMILIES, OPS

    if op not in OPS:
        return None
    protocol = FAMILIES[OPS[op]]
    annotation = inspect.signature(getattr(protocol, op)).return_annotation
    annotation = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "None")
    if "None" in _top_level_union(annotation):
        return None
    return f"{protocol.__name__}.{op} returns {annotation}"


def _top_level_union(annotation: str) -> list[str]:
    """``float | None`` -> ['float', 'None']; ``list[int | None]`` -> ['list[int | None]']."""
    parts, depth, current = [], 0, ""
    for char in annotation:
        depth += (char == "[") - (char == "]")
        if char == "|" and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()]


class ReturnChecked:
    """``backend`` as a case's property sees it: its own attributes, its ops' None returns checked."""

    __slots__ = ("_backend", "_clause", "_where")

    def __init__(self, backend, *, clause: str, where: str):
        object.__setattr__(self, "_backend", backend)
        object.__setattr__(self, "_clause", clause)
        object.__setattr__(self, "_where", where)

    def __getattr__(self, name: str):
        value = getattr(self._backend, name)
        said = promised(name) if callable(value) else None
        if said is None:
            return value

        @functools.wraps(value)
        def op(*args, **kwargs):
            result = value(*args, **kwargs)
            if result is None:
                message = f"{self._where}: {name} returned None; {said}"
                raise ReturnedNone(self._clause, message, relation=f"{name} returned None")
            return result

        return op

    def __setattr__(self, name: str, value) -> None:
        setattr(self._backend, name, value)

    def __repr__(self) -> str:
        return repr(self._backend)


@contextlib.contextmanager
def checked(item, backend):
    """While the case runs, its ``backend`` argument is the ``ReturnChecked`` view of ``backend`` (a
    case without one, or of a user's own test that is not the suite's, is left as it is)."""
    funcargs = getattr(item, "funcargs", None)
    op = item.get_closest_marker("op")
    clauses = [c for mark in item.iter_markers("clause") for c in mark.args]
    if not (backend is not None and op and clauses and isinstance(funcargs, dict)) or (
        funcargs.get("backend") is not backend
    ):
        yield
        return
    device = getattr(item.callspec.params.get("device"), "type", None)
    where = f"{op.args[0]} on backend {backend.name!r} @ {device}"
    funcargs["backend"] = ReturnChecked(backend, clause=clauses[0], where=where)
    try:
        yield
    finally:
        funcargs["backend"] = backend

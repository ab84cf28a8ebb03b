"""What a backend promises beyond its results (spec/invariance.md, Promises), and the n/i reason
for a case whose promise it does not make.

A property names the promise it needs with ``@pytest.mark.promise(NAME)`` beside its
``@pytest.mark.op``; the plugin skips the case at setup, before Hypothesis draws anything, with
``not_promised``'s reason, which starts "not implemented" so that the case is recorded as n/i
(conformance.results.Outcome.NOT_IMPLEMENTED), never failed. A malformed declaration fails the case
with ``PromiseError``'s one line naming the attribute.
"""

from __future__ import annotations

from collections.abc import Collection

# promise -> (what it means in a skip reason, the clauses it gates): spec/invariance.md, Promises.
PROMISES = {
    "deterministic": ("run-to-run determinism", "DET-RUN"),
    "batch_invariant": ("batch invariance", "INV-ROW, INV-PERM, INV-SEQ"),
    "kv_split_size": ("a fixed KV split size", "INV-SPLIT, INV-PREFILL-DECODE, INV-CHUNK, INV-PREFIX"),
    # spec/padding.md: the padding form only vLLM sends; the field's other kernels never receive it
    "empty_requests": ("vLLM's zero-length padded requests", "PAD-SERVE-EMPTY"),
}


# Every clause a promise gates: a case of one is n/i for a backend that does not make it.
GATED = frozenset(c.strip() for _, clauses in PROMISES.values() for c in clauses.split(","))


class PromiseError(ValueError):
    """A backend's promise attribute that is not of the form spec/invariance.md (Promises) gives."""


def _op_set(backend, attr: str) -> bool | frozenset:
    """``True`` (every op), or the set of op names, declared in ``attr``; False when undeclared."""
    from backends import OPS

    value = getattr(backend, attr, None)
    if value is None or value is False:
        return False
    if value is True:
        return True
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise PromiseError(
            f"backend {backend.name!r}: {attr} must be True or a collection of op names, got {value!r}"
        )
    unknown = sorted(str(op) for op in value if op not in OPS)
    if unknown:
        raise PromiseError(f"backend {backend.name!r}: {attr} names unknown op(s) {unknown}")
    return frozenset(value)


def promises(backend, promise: str, op: str) -> bool:
    """Whether ``backend`` makes ``promise`` for ``op``. ``batch_invariant`` implies
    ``deterministic``; ``kv_split_size`` concerns ``paged_attention`` and needs ``batch_invariant``
    for it (spec/invariance.md, Promises)."""
    if promise not in PROMISES:
        raise KeyError(f"unknown promise {promise!r}; known: {sorted(PROMISES)}")
    if promise == "kv_split_size":
        return (
            split_size(backend) is not None
            and op == "paged_attention"
            and promises(backend, "batch_invariant", op)
        )
    declared = _op_set(backend, promise)
    if declared is True or (declared and op in declared):
        return True
    return promise == "deterministic" and promises(backend, "batch_invariant", op)


def split_size(backend) -> int | None:
    """The declared ``kv_split_size`` (an int >= 1), or None when undeclared."""
    value = getattr(backend, "kv_split_size", None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PromiseError(f"backend {backend.name!r}: kv_split_size must be an int >= 1, got {value!r}")
    return value


def not_promised(backend, promise: str, op: str) -> str | None:
    """None when ``backend`` promises ``promise`` for ``op``, else the n/i reason the case reports."""
    if promises(backend, promise, op):
        return None
    what, clauses = PROMISES[promise]
    declared = getattr(backend, promise, None) not in (None, False)
    why = f"it declares no {promise}" if not declared else f"its {promise} does not cover {op}"
    if promise == "kv_split_size" and declared and op == "paged_attention":
        why = "a fixed split needs batch_invariant for paged_attention too"
    return (
        f"not implemented: backend {backend.name!r} does not promise {what} for {op} "
        f"({clauses}; spec/invariance.md, Promises: {why})"
    )


def skip_reason(item, backend) -> str | None:
    """At setup: the n/i reason of a case marked ``promise(NAME)`` whose backend does not make it for
    the case's ``op``; a malformed declaration fails the case with its one line."""
    import pytest

    mark, op = item.get_closest_marker("promise"), item.get_closest_marker("op")
    if mark is None or op is None:
        return None
    try:
        return not_promised(backend, mark.args[0], op.args[0])
    except PromiseError as exc:
        pytest.fail(str(exc), pytrace=False)

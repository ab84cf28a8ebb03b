"""Which backends and devices a run tests: ``--backend``, ``--backend-module`` (its backends are
selected automatically; ``--backend`` picks among them), the installed entry points,
``--device``; every mistake is one usage error naming the option."""

from __future__ import annotations

import pytest

from conformance.devices import DeviceError, parse, present_devices


def _registry():
    """The ``backends`` registry, imported only once the plugin is active (never in an unrelated run)."""
    import backends

    return backends


def _load_module_backends(spec: str) -> list:
    """``--backend-module spec``'s backends; any error importing it is a one-line usage error."""
    registry = _registry()
    try:
        loaded = registry.load_backend_module(spec)
    except registry.BackendError as exc:
        raise pytest.UsageError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - a SyntaxError, RuntimeError... raised by the user's module
        raise pytest.UsageError(
            f"--backend-module {spec}: importing it raised {type(exc).__name__}: {exc}"
        ) from exc
    clashing = sorted({b.name for b in loaded} & set(registry.BUILTIN))
    if clashing:
        raise pytest.UsageError(
            f"--backend-module {spec}: backend(s) {clashing} have the name of a built-in backend; "
            "give them another name"
        )
    return loaded


def _entry_point_backends() -> list:
    """The installed entry points' backends; one that raises on load is a one-line usage error."""
    registry = _registry()
    try:
        return registry.entry_point_backends()
    except registry.BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the installed package's module raises
        raise pytest.UsageError(
            f"an installed {registry.ENTRY_POINT_GROUP!r} entry point raised {type(exc).__name__}: {exc}"
        ) from exc


def backends(config) -> list:
    """The run's backends: ``--backend``'s names (among the built-in, installed and module backends),
    and each ``--backend-module``'s backends, only the named ones of a module whose backends
    ``--backend`` names (it selects among them too), all of one it names none of."""
    registry = _registry()
    names = config.getoption("backend")
    module_specs = config.getoption("backend_module")
    try:
        modules = [_load_module_backends(spec) for spec in module_specs]
        from_modules = [b for loaded in modules for b in loaded]
        if not names and from_modules:
            return registry.unique_by_name(from_modules)
        known = registry.unique_by_name(registry.builtin_backends() + _entry_point_backends() + from_modules)
    except registry.BackendError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if not names:
        return known
    by_name = {b.name: b for b in known}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise pytest.UsageError(f"--backend: unknown backend(s) {unknown}; known: {sorted(by_name)}")
    kept = [b for loaded in modules for b in ([b for b in loaded if b.name in names] or loaded)]
    return registry.unique_by_name([by_name[n] for n in names] + kept)


def devices(config) -> list[str]:
    """The device types of ``--device`` (``npu:3`` is type npu; its card: conformance.harness.cards)."""
    values = config.getoption("device") or present_devices()
    try:
        return list(dict.fromkeys(parse(v)[0] for v in values))
    except DeviceError as exc:
        raise pytest.UsageError(str(exc)) from exc


def is_peer(backend) -> bool:
    """Whether ``backend`` is one of the built-in peers (``backends.PEERS``), not a user's backend of
    the same name."""
    if backend is None:  # never import backends then: a user's project may have its own
        return False
    from backends import PEERS

    return backend.name in PEERS and is_builtin(backend)


def is_builtin(backend) -> bool:
    """Whether ``backend`` is the registry's own built-in of its name (``backends.BUILTIN``), not a
    user's or an entry point's backend."""
    from backends import BUILTIN

    target = BUILTIN.get(getattr(backend, "name", None))
    if target is None:
        return False
    module, defined_in = target.partition(":")[0], type(backend).__module__
    return defined_in == module or defined_in.startswith(module + ".")


def check_unavailable(backends: list, devices: list[str]) -> None:
    """Ask each user's or entry point's backend ``unavailable`` once per present device before any
    case runs: one that raises is a broken backend, one usage error naming it (every case would
    otherwise fail, even of ops it does not implement, and none of them for a fault of its kernels).
    The built-in backends are not asked: theirs catch their own failures and return the reason, and
    diffusers' imports diffusers (seconds), in every process, even when -k deselects its cases."""
    import torch

    for backend in [b for b in backends if not is_builtin(b)]:
        for name in devices:
            try:
                backend.unavailable(torch.device(name))
            except Exception as exc:  # noqa: BLE001 - whatever the user's backend raises
                raise pytest.UsageError(
                    f"backend {backend.name!r}: unavailable({name!r}) raised {type(exc).__name__}: {exc} "
                    "(it must return None when usable there, else the reason it is not)"
                ) from exc


def out_of_scope(backend, marks) -> str | None:
    """The n/i reason when ``backend`` declares ``clause_scope`` (the clause IDs it is built to be
    judged on, as the ``invariant`` reference backend: spec/invariance.md) and the clause ``marks``
    name none of them; None when it declares none or one of them is named."""
    scope = getattr(backend, "clause_scope", None)
    if scope is None or {c for mark in marks for c in mark.args} & set(scope):
        return None
    judged = ", ".join(sorted(scope))
    return f"not implemented: backend {backend.name!r} is judged only on {judged} (clause_scope)"


def scoped(backends: list, marks) -> list:
    """At generation: no cases of a property outside a backend's ``clause_scope`` (unless that leaves
    none: their cases then skip at setup, ``out_of_scope``)."""
    marks = list(marks)
    return [b for b in backends if out_of_scope(b, marks) is None] or backends

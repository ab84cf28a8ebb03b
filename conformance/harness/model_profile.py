"""The plugin's model-profile side (spec/models.md, MODEL-RUN): ``--opconform-model NAME`` and
``--opconform-model-config PATH``.

Given one of them, the run derives the model's profile (``conformance.models``), pins the
strategies to its fixed parameters (``conformance.strategies.common.pin_model``: head counts and
dims, windows, scale, rope dims, norm eps, MoE routing; shapes stay drawn), deselects the
properties of ops the model does not call and of clauses it does not use, and tags every case and
the results document with the model. Without either option nothing here acts (the plugin's run
is unchanged). Torch-free to import: the profile is derived only once the option is seen.
"""

from __future__ import annotations

import pytest

from conformance import rerun

MODEL = pytest.StashKey[object]()  # the Derived profile of this run


def add_options(group) -> None:
    group.addoption(
        "--opconform-model",
        default=None,
        metavar="NAME",
        help="run the properties at a built-in model profile's parameters (spec/models.md), only the "
        "ops that model calls; its cases and the report carry the model's name",
    )
    group.addoption(
        "--opconform-model-config",
        default=None,
        metavar="PATH",
        help="like --opconform-model, for a local config.json read with transformers' class for its "
        "model_type (no network)",
    )


def derived(config):
    """This run's derived profile, or None."""
    return config.stash.get(MODEL, None)


class BackendPins:
    """MODEL-BACKEND: the cases of a backend that declares ``opconform_model = NAME`` (a mutant wrong
    only at that model's parameters) are drawn at that profile's pins, the run's own pins around
    them. Registered only when a selected backend declares one."""

    def __init__(self):
        self.cache: dict[str, dict] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        backend = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
        name = getattr(backend, BACKEND_MODEL, None)
        if not isinstance(name, str):
            return (yield)
        from conformance.models import configs
        from conformance.strategies import common

        if name not in self.cache:
            self.cache[name] = configs.by_name(name).pins
        saved = common.pinned_table()
        common.pin_model(self.cache[name])
        try:
            return (yield)
        finally:
            common.pin_model(saved)


BACKEND_MODEL = "opconform_model"  # the attribute a backend declares its model with


def activate(config, backends=()) -> None:
    """Derive the profile and pin the strategies (once, in every process: xdist workers too)."""
    declared = {
        b.name: getattr(b, BACKEND_MODEL) for b in backends if getattr(b, BACKEND_MODEL, None) is not None
    }
    if declared:
        from conformance.models import builtin

        bad = {n: m for n, m in declared.items() if m not in builtin.BUILTIN}
        if bad:
            raise pytest.UsageError(
                f"backend(s) {sorted(bad)}: {BACKEND_MODEL} names no built-in model "
                f"({sorted(set(map(str, bad.values())))}); built-in models: {sorted(builtin.BUILTIN)}"
            )
        config.pluginmanager.register(BackendPins(), "opconform-backend-model")
    name, path = config.getoption("opconform_model", None), config.getoption("opconform_model_config", None)
    if name is None and path is None:
        return
    if name is not None and path is not None:
        raise pytest.UsageError("--opconform-model and --opconform-model-config: give one of them")
    from conformance.models import configs
    from conformance.strategies import common

    try:
        profile = configs.by_name(name) if name is not None else configs.from_file(path)
    except configs.ModelError as exc:
        option = "--opconform-model" if name is not None else "--opconform-model-config"
        raise pytest.UsageError(f"{option}: {exc}") from None
    common.pin_model(profile.pins)
    config.stash[MODEL] = profile
    option = f"--opconform-model={name}" if name is not None else f"--opconform-model-config={path}"
    config.stash.setdefault(rerun.OPTIONS, []).append(option)


def unused_reason(item, profile) -> str | None:
    """Why the model does not need ``item`` (its op, its clauses, its rope style, a parameter its uses
    of the op fix), or None."""
    mark = item.get_closest_marker("op")
    if mark is None:
        return "checks no op of the model at its parameters"
    if mark.args[0] not in profile.ops:
        return f"op {mark.args[0]} not used by model {profile.name}"
    clauses = [c for m in item.iter_markers("clause") for c in m.args]
    if clauses and all(c in profile.unused_clauses for c in clauses):
        return f"not used by model {profile.name}: {profile.unused_clauses[clauses[0]]}"
    params = getattr(getattr(item, "callspec", None), "params", {})
    style = params.get("is_neox_style")
    if style is not None and profile.rope_styles and style not in profile.rope_styles:
        return f"not used by model {profile.name}: its rope style"
    # MODEL-FAMILIES: a case parametrized over a parameter the model's uses of its op fix (npu_geglu_args'
    # approximate, a window converter's sliding_window) runs at the model's values only.
    fixed: dict[str, list] = {}
    for use in profile.uses:
        if use.op == mark.args[0]:
            for key, value in use.params.items():
                fixed.setdefault(key, []).append(value)
    for name, value in params.items():
        if name in fixed and value not in fixed[name]:
            shown = ", ".join(dict.fromkeys(map(str, fixed[name])))
            return f"not used by model {profile.name}: its {name} is {shown}"
    return None


def deselect(config, items) -> None:
    """Drop the cases the model does not need (``unused_reason``), with one terminal line."""
    profile = derived(config)
    if profile is None:
        return
    kept = [item for item in items if unused_reason(item, profile) is None]
    dropped = [item for item in items if unused_reason(item, profile) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"opconform: model {profile.name} ({profile.title}): {len(kept)} case(s) of its ops at its "
            f"parameters, {len(dropped)} not used by the model deselected"
        )


def annotate(config, document):
    """Every case, and the document's ``models`` table, carry the model (MODEL-REPORT)."""
    profile = derived(config)
    if profile is not None:
        for case in document.results:
            case.model = profile.name
        document.models = {profile.name: profile.summary()}
    return document

"""The opconform pytest plugin: backend x device parametrization, profiles, clause markers.

Options: ``--backend NAME`` and ``--device NAME`` (repeatable), ``--backend-module
MODULE[:ATTR]`` (repeatable; its backends are selected automatically) and ``--opconform-json
PATH`` (a machine-readable record of every case). A test of the suite, or one marked with
``@pytest.mark.clause("ID", ...)`` or ``@pytest.mark.op("name")``, opts in by taking the ``backend``
and ``device`` arguments. A pair the backend cannot run, a device that is absent, or an op
the backend lacks is a skip with its reason, decided at setup (so collection never imports an
optional framework).

Registered through the ``pytest11`` entry point; the repository's conftest.py loads it when the
package is not installed. It acts only in runs that give an opconform option or collect the suite
(``conformance.harness.activation``); any other run in the environment is left as it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

import conformance.harness.exit_gc as exit_gc
import conformance.signatures as signatures
from conformance import expectations as manifests
from conformance import options, product, promises, rerun, returns, spec_index
from conformance.devices import KNOWN_DEVICE_TYPES, absent_reason
from conformance.harness import (
    activation,
    failfast,
    failure_capture,
    levels,
    profiles,
    recorder,
    selection,
    time_limit,
    watchdog,
)
from conformance.harness import model_profile as models
from conformance.harness import stream as fast_verdict
from conformance.harness.activation import state

# pytest's exit status when a --device device is absent (its own are 0-5); `opconform run` exits 3 then
EXIT_DEVICE_ABSENT = 6
pytest_plugins = ["conformance.harness.cards"]  # xdist's hooks (DEV-CARDS), -n auto's before configure

# Third-party noise, not findings: torch's jit deprecation, diffusers passing copy=False to numpy 2
# (1,200 per run), the eager `flex` backend running FlexAttention unfused on purpose. Added when the
# plugin activates, wherever the run starts; the checkout's conftest.py adds them for the self-tests.
WARNING_FILTERS = (
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning",
    "ignore:flex_attention called without torch.compile:UserWarning",
)


def _registry():
    """The ``backends`` registry, imported only once the plugin is active (never in an unrelated run)."""
    import backends

    return backends


def pytest_addoption(parser):
    group = parser.getgroup("opconform")
    group.addoption(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="backend to test (repeatable; default: every registered backend)",
    )
    group.addoption(
        "--backend-module",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="load external backends from MODULE.ATTR (ATTR defaults to BACKEND; "
        "one backend or an iterable); they are selected automatically",
    )
    group.addoption(
        "--device",
        action="append",
        default=[],
        metavar="NAME",
        help=f"device (repeatable; {KNOWN_DEVICE_TYPES}, cuda/npu: every card; npu:3, npu:0,1: those cards)",
    )
    group.addoption("--opconform-json", default=None, metavar="PATH",
                    help="write every case's outcome, clauses, backend and device as JSON")  # fmt: skip
    group.addoption(
        "--focus-declared-clauses",
        action="store_true",
        help="for backends that declare the clauses they must fail (`clauses`, as mutants do), run "
        "only the properties that check one of those clauses",
    )
    group.addoption(
        "--opconform-timeout",
        type=options.seconds,
        default=None,
        metavar="SECONDS",
        help="per-case time limit: a case still running after SECONDS is stopped and reported as "
        "'timeout' (needs SIGALRM: Unix, main thread; a hang in native code is ended from outside "
        "the worker under xdist only); default 300 for the suite's cases (3000 under "
        "opconform-thorough, none under opconform-debug or --pdb); 0: none; a finite number >= 0",
    )
    group.addoption(
        "--opconform-backend-maxfail",
        type=options.count,
        default=None,
        metavar="N",
        help="after N failed cases of a backend, skip its remaining cases (conformance/harness/failfast.py); "
        "0: no limit",
    )
    group.addoption(
        "--opconform-first-failure",
        action="store_true",
        help="after a clause's first failed case on a backend and device, skip that backend's and "
        "device's remaining cases of the clause (conformance/harness/failfast.py); the run completes",
    )
    group.addoption(
        "--opconform-strict",
        action="store_true",
        help="SHOULD clauses' failures fail the run too (by default they are counted apart and only "
        "MUST failures fail it: spec/README.md, Levels)",
    )
    group.addoption(
        "--opconform-expectations",
        action="append",
        default=[],
        metavar="PATH",
        help="expectations manifest (TOML) or a directory of them (repeatable): declared deviations",
    )
    models.add_options(group)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """A short profile name (``dev``) that nobody registered means ``opconform-dev``; an unregistered
    --hypothesis-profile is a usage error (Hypothesis's own plugin would stop the run with an
    INTERNALERROR traceback)."""
    name = config.getoption("hypothesis_profile", None)
    if name is None:
        return
    if not profiles.registered(name) and profiles.registered(profiles.PREFIX + name):
        config.option.hypothesis_profile = name = profiles.PREFIX + name
    if not profiles.registered(name):
        raise pytest.UsageError(f"--hypothesis-profile: unknown profile {name!r}; known: {profiles.known()}")


@pytest.hookimpl(trylast=True)  # after Hypothesis's plugin loads --hypothesis-profile, see activate
def pytest_configure(config):
    config.addinivalue_line("markers", "clause(*ids): the spec clauses a test checks")
    config.addinivalue_line("markers", "op(name): the backend op a test needs")
    config.addinivalue_line("markers", "promise(name): the promise a test needs (conformance.promises)")
    # Inert until the suite's items run: an xdist controller, which collects nothing, streams too.
    config.pluginmanager.register(fast_verdict.FastVerdict(config), "opconform-fast-verdict")
    config.pluginmanager.register(levels.Levels(), "opconform-levels")  # inert without SHOULD failures
    if not hasattr(config, "workerinput"):  # xdist's controller, or a run without xdist
        config.pluginmanager.register(watchdog.Supervisor(config), "opconform-supervisor")
    if activation.requested(config):
        activate(config)


def activate(config) -> None:
    """Select backends and devices, load the spec, manifests and default profile, start the
    recorder: once, when an opconform option is given or the suite is first collected."""
    if state(config) is not None:
        return
    if config.getoption("backend_module"):  # importable from the start folder, as under python -m
        signatures.start_folder_on_path(config.invocation_params.dir)
    activation.check_not_shadowed()
    why = options.unwritable(config.getoption("opconform_json"))
    if why:  # found after every case had run, it was a traceback and no report
        raise pytest.UsageError(
            f"--opconform-json {config.getoption('opconform_json')}: cannot write there: {why}"
        )
    profile = profiles.for_suite(config.getoption("hypothesis_profile", None))
    loaded = settings.get_current_profile_name()  # --hypothesis-profile's, with its verbosity
    if profile != config.getoption("hypothesis_profile", None):
        loaded = profiles.with_verbosity(profile, config.getoption("hypothesis_verbosity", None))
    # Loaded only while the suite's modules are collected and its tests run (SuiteProfile).
    scope = profiles.SuiteProfile(loaded, activation.is_suite_module)
    config.pluginmanager.register(scope, "opconform-profile")
    config.pluginmanager.register(time_limit.TimeLimit(config, profile), "opconform-time-limit")
    watchdog.activate(config)  # a worker's side files for the watchdog
    exit_gc.register(config)
    run = activation.State(selection.backends(config), selection.devices(config), profile=profile)
    from conformance.harness import cards  # loaded as a plugin first (pytest_plugins): its asserts rewritten

    cards.activate(config, run)  # DEV-CARDS
    run.loaded_profile = loaded
    signatures.check_loaded(config, run.backends)  # one line per mismatched op, printed now
    selection.check_unavailable(run.backends, [d for d in run.devices if not absent_reason(d)])
    if config.getoption("device"):  # devices asked for by name that are absent: the run must not pass
        run.absent = {d: absent_reason(d) for d in run.devices if absent_reason(d)}
    try:
        run.clauses = spec_index.load_clauses()
        builtin = manifests.builtin_manifest_dir()
        paths = [*([builtin] if builtin else []), *config.getoption("opconform_expectations")]
        # A path given twice (the built-in directory passed explicitly) is loaded once.
        unique = list(dict.fromkeys(str(Path(p).resolve()) for p in paths))
        loaded = manifests.load_manifests(unique, known_clauses=run.clauses)
        run.expectations, run.inapplicable = manifests.applying(loaded, product.software)  # DEV-WHEN
    except (OSError, ValueError) as exc:  # a missing spec, a bad spec or a bad manifest
        raise pytest.UsageError(str(exc)) from exc
    for line in WARNING_FILTERS:
        config.addinivalue_line("filterwarnings", line)
    config.stash[rerun.OPTIONS] = rerun.rerun_options(
        backends=config.getoption("backend"),
        backend_modules=config.getoption("backend_module"),
        expectations=config.getoption("opconform_expectations"),
        profile=profile,
        seed=config.getoption("hypothesis_seed", None),
        timeout=config.getoption("opconform_timeout"),
        strict=config.getoption("opconform_strict"),
    )
    models.activate(config, run.backends)  # --opconform-model: the profile's pins, its rerun option
    config.stash[activation.STATE] = run
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(recorder.ResultsRecorder(config), "opconform-results")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    """A case of an op whose signature misses its protocol fails with that one line, unrun; a case a
    manifest declares failing runs unshrunk, and a built-in peer's draws its share of the examples
    (conformance.harness.profiles.adjusted); an op returning None fails as that (conformance.returns)."""
    signatures.fail_mismatched(item)
    info = dict(item.user_properties).get(recorder.INFO) if state(item.config) is not None else None
    # Setup listed the entries that may apply (case_info): most cases have none, and match no entry again.
    declared = bool(info and info["expectations"]) and any(
        e.reason != "unsupported" for e in recorder.matching(item.config, item.nodeid, info, "yes")
    )
    run = state(item.config)
    backend = activation.backend_of(item) if run is not None else None
    peer = selection.is_peer(backend)
    adjusted = profiles.adjusted(getattr(item, "obj", None), unshrunk=declared, peer=peer,
                                 profile=run and run.profile)  # fmt: skip
    with adjusted, returns.checked(item, backend), recorder.statistics_of(item):
        return (yield)


def pytest_collectstart(collector):
    """Collecting one of the suite's modules activates the plugin before the module is imported."""
    if isinstance(collector, pytest.Module) and activation.is_suite_module(collector.path):
        activate(collector.config)


def _is_suite_test(metafunc) -> bool:
    """A property of the suite, or a test marked like one; never a user's own ``backend`` argument."""
    if activation.is_suite_module(metafunc.definition.path):
        return True
    return any(metafunc.definition.get_closest_marker(mark) for mark in ("clause", "op"))


@pytest.hookimpl(tryfirst=True)  # before -k/-m and --focus-declared-clauses deselect items
def pytest_collection_modifyitems(config, items):
    if state(config) is None:
        return
    rerun.remember(config, items)
    recorder.note_collection(config, items)
    models.deselect(config, items)
    if not config.getoption("focus_declared_clauses"):
        return
    kept, dropped = [], []
    for item in items:
        declared = getattr(activation.backend_of(item), "clauses", None)
        checked = {c for mark in item.iter_markers("clause") for c in mark.args}
        (kept if declared is None or checked & set(declared) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_generate_tests(metafunc):
    if "backend" not in metafunc.fixturenames or not _is_suite_test(metafunc):
        return
    config = metafunc.config
    activate(config)
    run = state(config)
    chosen = selection.scoped(_focused(metafunc, run.backends), metafunc.definition.iter_markers("clause"))
    pairs = [(b, d) for b in chosen for d in run.case_devices]  # DEV-CARDS
    argnames = ["backend", "device"] if "device" in metafunc.fixturenames else ["backend"]
    values = [pair if len(argnames) == 2 else pair[:1] for pair in pairs]
    ids = [f"{b.name}-{d.type}" if len(argnames) == 2 else b.name for b, d in pairs]
    if len(argnames) == 1:
        values, ids = list(dict.fromkeys(map(tuple, values))), list(dict.fromkeys(ids))
    metafunc.parametrize(argnames, values, ids=ids)


def _focused(metafunc, backends: list) -> list:
    """--focus-declared-clauses at generation: a backend that declares ``clauses`` gets this property's
    cases only when it checks one of them, so a run of many such backends (the mutants) does not build
    thousands of items to deselect. A property none of them checks keeps one backend's items, which
    pytest_collection_modifyitems deselects as before (so -k, staleness and counts see it)."""
    if not metafunc.config.getoption("focus_declared_clauses"):
        return backends
    checked = {c for mark in metafunc.definition.iter_markers("clause") for c in mark.args}
    kept = [b for b in backends if getattr(b, "clauses", None) is None or checked & set(b.clauses)]
    return kept or backends[:1]


def absent_message(config) -> str | None:
    """The one line saying which requested devices are absent, or None."""
    absent = getattr(state(config), "absent", None)
    if not absent:
        return None
    return "requested device(s) absent: " + "; ".join(f"{d} ({why})" for d, why in absent.items())


def pytest_sessionfinish(session, exitstatus):
    """A requested (--device) device that is absent fails the run even though its cases skip."""
    if absent_message(session.config) and exitstatus in (0, 1, 5):
        session.exitstatus = EXIT_DEVICE_ABSENT


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    message = absent_message(config)
    if message:
        terminalreporter.write_line(f"opconform: {message}", red=True, bold=True)


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector, name, obj):
    """A test that names a clause missing from spec/*.md, or an op missing from the op table
    (``backends.OPS``), is a collection error (while the plugin is active)."""
    result = yield
    run = state(collector.config)
    if run is None:
        return result
    ops = _registry().OPS
    items = result if isinstance(result, list) else [result] if result is not None else []
    for item in items:
        if not isinstance(item, pytest.Item):
            continue
        unknown = [c for mark in item.iter_markers("clause") for c in mark.args if c not in run.clauses]
        if unknown:
            raise collector.CollectError(
                f"{item.nodeid}: @pytest.mark.clause names unknown clause(s) {unknown}: "
                "no '### ID: title' heading in spec/*.md"
            )
        # An op mark names exactly one op of the table; a typo would make it "not implemented" everywhere.
        marks = [m.args for m in item.iter_markers("op")]
        bad_ops = [args for args in marks if len(args) != 1 or args[0] not in ops]
        if bad_ops:
            raise collector.CollectError(
                f"{item.nodeid}: @pytest.mark.op names unknown op(s) {bad_ops}; "
                f"known ops (backends.OPS): {sorted(ops)}"
            )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach failure facts and apply the expectations manifests to the call report."""
    report = yield
    if state(item.config) is None:
        return report
    if call.when == "call" and not report.skipped and recorder.INFO in dict(item.user_properties):
        recorder.record_call(item, call, report)
    failure_capture.readable_skip(item, report, activation.backend_of(item))
    failfast.note(item.config, activation.backend_of(item), report)
    return report


def pytest_runtest_setup(item):
    if state(item.config) is None:
        return
    backend, device = activation.backend_of(item), getattr(item, "callspec", None)
    device = getattr(device, "params", {}).get("device")
    if backend is not None or item.get_closest_marker("clause"):
        # user_properties travel with every report, also from xdist workers to the recorder.
        recorder.attach_case(item)
    if isinstance(getattr(device, "type", None), str):  # not a user test's own `device` argument
        reason = absent_reason(device.type)
        if reason:
            pytest.skip(f"device {device.type}: {reason}")
    if backend is None:
        return
    info = dict(item.user_properties).get(recorder.INFO)
    label = recorder.unsupported_entry(item, info) if info else None
    if label:
        pytest.skip(label)
    reason = failfast.skip_reason(item.config, backend)
    if reason:
        pytest.skip(reason)
    op_mark = item.get_closest_marker("op")  # first: unavailable() may import (diffusers: seconds)
    if op_mark:
        reason = _registry().not_implemented_reason(backend, op_mark.args[0])
        if reason:
            pytest.skip(reason)
    if device is not None:
        reason = backend.unavailable(device)
        if reason:
            pytest.skip(f"backend {backend.name!r} unavailable on {device.type}: {reason}")
    reason = selection.out_of_scope(backend, item.iter_markers("clause")) or promises.skip_reason(
        item, backend
    )
    if reason:
        pytest.skip(reason)

"""The opconform pytest plugin: backend x device parametrization, profiles, clause markers.

Options: ``--backend NAME`` and ``--device NAME`` (repeatable), ``--backend-module
MODULE[:ATTR]`` (repeatable; its backends are selected automatically) and ``--opconform-json
PATH`` (a machine-readable record of every case). A test opts in by taking the ``backend`` and
``device`` arguments and declares what it checks with ``@pytest.mark.clause("ID", ...)`` and
``@pytest.mark.op("name")``. A pair the backend cannot run, a device that is absent, or an op
the backend lacks is a skip with its reason, decided at setup (so collection never imports an
optional framework).

Registered through the ``pytest11`` entry point; the repository's conftest.py loads it when the
package is not installed.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from hypothesis import HealthCheck, Phase, Verbosity, settings

import backends as registry
from conformance import checks
from conformance.devices import KNOWN_DEVICE_TYPES, absent_reason, present_devices

NOT_IMPLEMENTED = "not implemented"
JSON_SCHEMA_VERSION = 1

# Hypothesis profiles. "ci" is chosen when the CI environment variable is set; derandomize makes
# a serial run and `-n auto` draw identical examples.
_BASE = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=30, print_blob=True, **_BASE)
settings.register_profile("ci", max_examples=30, derandomize=True, print_blob=True, database=None, **_BASE)
settings.register_profile("thorough", max_examples=300, print_blob=True, **_BASE)
settings.register_profile("debug", max_examples=10, verbosity=Verbosity.verbose, print_blob=True, **_BASE)
# "ci" without the shrink phase: the same examples, so the same verdicts, minus the minimal
# example. For runs that only need to know whether (and by which clause) a backend fails, such
# as the mutant kill matrix.
settings.register_profile(
    "ci-noshrink", parent=settings.get_profile("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate]
)


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
        help=f"device type to test on (repeatable; one of {KNOWN_DEVICE_TYPES}; default: every present one)",
    )
    group.addoption(
        "--opconform-json",
        default=None,
        metavar="PATH",
        help="write every case's outcome, clauses, backend and device as JSON",
    )


def _select_backends(config) -> list:
    names = config.getoption("backend")
    module_specs = config.getoption("backend_module")
    try:
        from_modules = [b for spec in module_specs for b in registry.load_backend_module(spec)]
        if not names and from_modules:
            return registry.unique_by_name(from_modules)
        known = registry.unique_by_name(
            registry.builtin_backends() + registry.entry_point_backends() + from_modules
        )
    except registry.BackendError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if not names:
        return known
    by_name = {b.name: b for b in known}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise pytest.UsageError(f"--backend: unknown backend(s) {unknown}; known: {sorted(by_name)}")
    return registry.unique_by_name([by_name[n] for n in names] + from_modules)


def _select_devices(config) -> list[str]:
    devices = config.getoption("device") or present_devices()
    unknown = [d for d in devices if d not in KNOWN_DEVICE_TYPES]
    if unknown:
        raise pytest.UsageError(f"--device: unknown device(s) {unknown}; expected {KNOWN_DEVICE_TYPES}")
    return list(dict.fromkeys(devices))


def pytest_configure(config):
    config.addinivalue_line("markers", "clause(*ids): the spec clauses a test checks")
    config.addinivalue_line("markers", "op(name): the backend op a test needs")
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile("ci" if os.environ.get("CI") else "dev")
    config._opconform_backends = _select_backends(config)
    config._opconform_devices = _select_devices(config)
    rerun = [f"--backend-module={spec}" for spec in config.getoption("backend_module")]
    rerun += [f"--hypothesis-profile={settings._current_profile}"]
    seed = config.getoption("hypothesis_seed", None)
    if seed is not None:
        rerun.append(f"--hypothesis-seed={seed}")
    checks.RERUN_OPTIONS[:] = rerun
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(ResultsRecorder(config), "opconform-results")


def pytest_generate_tests(metafunc):
    if "backend" not in metafunc.fixturenames:
        return
    config = metafunc.config
    pairs = [(b, torch.device(d)) for b in config._opconform_backends for d in config._opconform_devices]
    argnames = ["backend", "device"] if "device" in metafunc.fixturenames else ["backend"]
    values = [pair if len(argnames) == 2 else pair[:1] for pair in pairs]
    ids = [f"{b.name}-{d.type}" if len(argnames) == 2 else b.name for b, d in pairs]
    if len(argnames) == 1:
        values, ids = list(dict.fromkeys(map(tuple, values))), list(dict.fromkeys(ids))
    metafunc.parametrize(argnames, values, ids=ids)


def _case_info(item) -> dict:
    params = getattr(getattr(item, "callspec", None), "params", {})
    backend, device = params.get("backend"), params.get("device")
    clauses = [c for mark in item.iter_markers("clause") for c in mark.args]
    op_mark = item.get_closest_marker("op")
    return {
        "backend": getattr(backend, "name", None),
        "device": getattr(device, "type", None),
        "op": op_mark.args[0] if op_mark else None,
        "clauses": clauses,
    }


def pytest_runtest_setup(item):
    params = getattr(getattr(item, "callspec", None), "params", {})
    backend, device = params.get("backend"), params.get("device")
    if backend is not None or item.get_closest_marker("clause"):
        # user_properties travel with every report, also from xdist workers to the recorder.
        item.user_properties.append(("opconform", _case_info(item)))
    if device is not None:
        reason = absent_reason(device.type)
        if reason:
            pytest.skip(f"device {device.type}: {reason}")
    if backend is None:
        return
    if device is not None:
        reason = backend.unavailable(device)
        if reason:
            pytest.skip(f"backend {backend.name!r} unavailable on {device.type}: {reason}")
    op_mark = item.get_closest_marker("op")
    if op_mark:
        reason = registry.not_implemented_reason(backend, op_mark.args[0])
        if reason:
            pytest.skip(reason)


class ResultsRecorder:
    """Collects each case's outcome on the controlling process (xdist workers forward reports)."""

    def __init__(self, config):
        self.config = config
        self.results: list[dict] = []
        self.started = time.time()

    def pytest_runtest_logreport(self, report):
        info = dict(report.user_properties).get("opconform")
        if info is None:
            return
        if report.when != "call" and not (report.failed or (report.when == "setup" and report.skipped)):
            return
        entry = {
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "duration": round(report.duration, 6),
            **info,
        }
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            entry["reason"] = reason.removeprefix("Skipped: ")
            if entry["reason"].startswith(NOT_IMPLEMENTED):
                entry["outcome"] = NOT_IMPLEMENTED
        elif report.failed:
            entry["message"] = report.longreprtext[-4000:]
        self.results.append(entry)

    def document(self, exitstatus: int) -> dict:
        return {
            "schema": "opconform-results",
            "version": JSON_SCHEMA_VERSION,
            "torch": torch.__version__,
            "backends": [b.name for b in self.config._opconform_backends],
            "devices": self.config._opconform_devices,
            "duration": round(time.time() - self.started, 3),
            "exitstatus": int(exitstatus),
            "results": sorted(self.results, key=lambda e: (e["nodeid"], e["when"])),
        }

    def pytest_sessionfinish(self, session, exitstatus):
        path = self.config.getoption("opconform_json")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(self.document(exitstatus), handle, indent=1)

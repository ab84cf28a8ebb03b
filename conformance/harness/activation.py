"""When the plugin acts: an opconform option on the command line, or the suite's modules collected.

Installing opconform registers the plugin for every pytest run in that environment; a run that
neither names an opconform option nor collects ``conformance/test_*.py`` (nor a test marked
``clause``/``op`` that takes ``backend``) must run exactly as without it. The plugin's per-run
state lives in ``config.stash`` under ``STATE``, present only once active.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# The options that ask for the suite: (dest, default) as pytest_addoption declares them.
OPTIONS = (
    ("backend", []),
    ("device", []),
    ("backend_module", []),
    ("opconform_json", None),
    ("opconform_expectations", []),
    ("opconform_timeout", None),
    ("opconform_backend_maxfail", None),
    ("opconform_first_failure", False),
    ("opconform_strict", False),
    ("focus_declared_clauses", False),
    ("opconform_model", None),
    ("opconform_model_config", None),
)
# Top-level packages of the distribution that a user's project may shadow (their names are fixed).
SIBLINGS = ("backends", "reference")


@dataclass
class State:
    """What an active run selected and loaded."""

    backends: list = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)  # requested devices that are absent: reason
    cards: dict[str, list[int]] = field(default_factory=dict)  # type -> chosen card indices (cards.py)
    card: dict[str, str] = field(default_factory=dict)  # type -> this process's card label, "npu:3"
    pins: dict[str, str] = field(default_factory=dict)  # card label -> the physical id it named
    untested: list[str] = field(default_factory=list)  # warnings: chosen cards no process runs on
    case_devices: list = field(default_factory=list)  # what the cases get per type (cards.torch_devices)
    clauses: dict = field(default_factory=dict)
    expectations: list = field(default_factory=list)
    inapplicable: list = field(default_factory=list)  # (entry, why): entries whose ``when`` is false
    profile: str | None = None  # the suite's profile (rerun lines carry it)
    loaded_profile: str | None = None  # the one loaded for its tests (with --hypothesis-verbosity)
    # What the run collected before deselection (recorder.note_collection); None until known.
    collected: dict | None = None


STATE = pytest.StashKey[State]()


def state(config) -> State | None:
    """The run's state, or None while the plugin is inactive."""
    return config.stash.get(STATE, None)


def requested(config) -> bool:
    """Whether an opconform option was given."""
    return any(config.getoption(dest) not in (default, None) for dest, default in OPTIONS)


def backend_of(item):
    """The backend a case runs on: its ``backend`` parameter when that is a backend (a ``name`` and
    ``unavailable``); None for a user's own test whose parameter of that name is something else."""
    backend = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
    return backend if hasattr(backend, "name") and hasattr(backend, "unavailable") else None


def suite_dir() -> Path:
    """The directory of the loaded ``conformance`` package."""
    return Path(sys.modules["conformance"].__file__).resolve().parent


def is_suite_module(path) -> bool:
    """Whether ``path`` is one of the suite's test modules (``conformance/test_*.py``)."""
    return _is_suite_module(str(path))


@functools.lru_cache(maxsize=256)  # asked per test by the profile and time-limit hooks
def _is_suite_module(path: str) -> bool:
    resolved = Path(path).resolve()
    return resolved.parent == suite_dir() and resolved.name.startswith("test_") and resolved.suffix == ".py"


def shadowing(name: str) -> str | None:
    """The one-line error when the top-level package ``name`` is not opconform's own, else None.

    A user's project with its own ``backends/`` (or ``reference/``) on sys.path before opconform
    would otherwise fail deep inside the plugin (``module 'backends' has no attribute ...``).
    """
    expected = suite_dir().parent / name
    module = sys.modules.get(name)
    try:
        # find_spec locates a top-level package without importing it.
        spec = None if module else importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    origin = getattr(module, "__file__", None) if module else getattr(spec, "origin", None)
    if origin is not None and Path(origin).resolve().parent == expected:
        return None
    found = origin or "nothing importable"
    return (
        f"opconform: the top-level package {name!r} resolves to {found}, not opconform's own "
        f"({expected}); a project's own {name!r} shadows it: run the suite from another directory "
        f"(or with that project's path off sys.path), or rename that package"
    )


def check_not_shadowed() -> None:
    """Raise pytest.UsageError naming the first shadowed sibling package."""
    for name in SIBLINGS:
        message = shadowing(name)
        if message:
            raise pytest.UsageError(message)

"""The one command line that reruns a single case, for failure messages and the results.

The line works from the folder the run started in, for a checkout and for an installed suite:
a suite case is named as ``--pyargs conformance.test_x::test_y[ids]`` (never a path relative to
pytest's rootdir, which an installed run places in site-packages), another test by its absolute
path. The plugin computes the options a rerun must repeat once per run (``rerun_options``) and
the target of each collected case (``remember``), and keeps them in ``config.stash``. The failing
Hypothesis example comes back through the profile and seed repeated here (docs/running.md, "Rerunning a
failure").
"""

from __future__ import annotations

import shlex
from importlib import metadata
from pathlib import Path

import pytest

from conformance.harness import activation

OPTIONS = pytest.StashKey[list]()
TARGETS = pytest.StashKey[dict]()
KINDS = pytest.StashKey[dict]()  # node id -> its device type (a case on a card reruns on that card)


# The plugin module (the pytest11 entry point's value), for `-p` where no entry point loads it.
PLUGIN = "conformance.harness.plugin"


def plugin_by_entry_point() -> bool:
    """Whether pytest loads the plugin by itself (an installed opconform's ``pytest11`` entry point)."""
    return any(ep.value == PLUGIN for ep in metadata.entry_points(group="pytest11"))


def rerun_options(
    *, backends=(), backend_modules, expectations, profile: str | None, seed, timeout=None, strict=False
) -> list[str]:
    """What a rerun must repeat: the plugin where no entry point loads it, the backends (a case's
    id exists only among the same selection), manifests, Hypothesis profile and seed, and the
    per-case time limit (a rerun of a case that timed out must not hang), --opconform-strict."""
    options = [] if plugin_by_entry_point() else ["-p", PLUGIN]
    options += [f"--backend={name}" for name in backends]
    options += [f"--backend-module={spec}" for spec in backend_modules]
    options += [f"--opconform-expectations={path}" for path in expectations]
    if profile:
        options.append(f"--hypothesis-profile={profile}")
    if seed is not None:
        options.append(f"--hypothesis-seed={seed}")
    if timeout:
        options.append(f"--opconform-timeout={timeout:g}")
    if strict:  # a SHOULD failure fails the rerun as it failed the run
        options.append("--opconform-strict")
    return options


def target(item) -> list[str]:
    """The arguments that select ``item`` from any folder: ``--pyargs`` for a suite module."""
    name = item.nodeid.partition("::")[2]
    if activation.is_suite_module(item.path):
        return ["--pyargs", f"{item.module.__name__}::{name}"]
    return [f"{Path(item.path).resolve()}::{name}"]


def remember(config, items) -> None:
    """Keep each collected case's rerun target (a report without its item looks it up)."""
    config.stash.setdefault(TARGETS, {}).update({item.nodeid: target(item) for item in items})
    params = {item.nodeid: getattr(getattr(item, "callspec", None), "params", {}) for item in items}
    kinds = {nodeid: getattr(p.get("device"), "type", None) for nodeid, p in params.items()}
    config.stash.setdefault(KINDS, {}).update({n: k for n, k in kinds.items() if isinstance(k, str)})


def target_of(config, nodeid: str) -> list[str]:
    """``nodeid``'s target: the collected item's, else (an xdist controller, which collects
    nothing) from the node id: a file under the rootdir by absolute path, a suite module by name."""
    known = config.stash.get(TARGETS, {}).get(nodeid)
    if known:
        return known
    path, _, name = nodeid.partition("::")
    local = Path(config.rootpath) / path
    if path and local.is_file() and not activation.is_suite_module(local):
        return [f"{local.resolve()}::{name}"]
    module = Path(path).name
    if module.endswith(".py") and activation.is_suite_module(activation.suite_dir() / module):
        return ["--pyargs", f"conformance.{module[:-3]}::{name}"]
    return [nodeid]


def command(nodeid: str, options: list[str], target: list[str] | None = None) -> str:
    return shlex.join(["python", "-m", "pytest", *(target or [nodeid]), "-p", "no:xdist", *options])


def for_item(config, nodeid: str) -> str:
    """The rerun command of ``nodeid`` in this run (options stashed at configure time), on the card
    its process ran it on (spec/devices.md, DEV-CARDS)."""
    return command(
        nodeid, config.stash.get(OPTIONS, []) + card_option(config, nodeid), target_of(config, nodeid)
    )


def card_option(config, nodeid: str) -> list[str]:
    """``--device=npu:3`` for a case this process ran on card npu:3; nothing otherwise."""
    run = activation.state(config)
    label = run.card.get(config.stash.get(KINDS, {}).get(nodeid)) if run is not None else None
    return [f"--device={label}"] if label else []

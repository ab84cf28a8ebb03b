"""The one command line that reruns a single case, for failure messages and the results.

The plugin computes the options a rerun must repeat once per run (``rerun_options``) and keeps
them in ``config.stash``; ``command(nodeid, options)`` builds the line. The failing Hypothesis
example is replayed from the example database, or use the @reproduce_failure blob printed with it.
"""

from __future__ import annotations

import shlex

import pytest

OPTIONS = pytest.StashKey[list]()


def rerun_options(*, backend_modules, expectations, profile: str | None, seed, timeout=None) -> list[str]:
    """What a rerun must repeat: external backends, manifests, Hypothesis profile and seed, and
    the per-case time limit (a rerun of a case that timed out must not hang)."""
    options = [f"--backend-module={spec}" for spec in backend_modules]
    options += [f"--opconform-expectations={path}" for path in expectations]
    if profile:
        options.append(f"--hypothesis-profile={profile}")
    if seed is not None:
        options.append(f"--hypothesis-seed={seed}")
    if timeout:
        options.append(f"--opconform-timeout={timeout:g}")
    return options


def command(nodeid: str, options: list[str]) -> str:
    return shlex.join(["python", "-m", "pytest", nodeid, "-p", "no:xdist", *options])


def for_item(config, nodeid: str) -> str:
    """The rerun command of ``nodeid`` in this run (options stashed at configure time)."""
    return command(nodeid, config.stash.get(OPTIONS, []))

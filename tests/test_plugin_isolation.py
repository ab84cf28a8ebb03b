"""The plugin changes nothing in a pytest run that does not use the suite (issue 12).

Installing opconform registers its plugin for every pytest run in the environment; an unrelated
project with its own ``backend`` fixture, its own ``backends`` package and its own Hypothesis
settings must run exactly as without it, and a run of the suite that such a project's
``backends`` shadows must stop with one line naming the shadowing package.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from suite_runner import REPO, produced_once

from conformance.rerun import PLUGIN, plugin_by_entry_point

# The plugin as a user's environment has it: from the pytest11 entry point when installed.
INSTALLED = plugin_by_entry_point()
WITH_PLUGIN = [] if INSTALLED else ["-p", PLUGIN]
WITHOUT_PLUGIN = ["-p", "no:opconform"] if INSTALLED else []

# What a user's test sees of Hypothesis, written to $OBSERVED/<name>.json: compared between a run
# with the plugin and the same run without it, never with a fixed profile name (Hypothesis loads
# its own "ci" wherever it detects CI: CI, tox's __TOX_ENVIRONMENT_VARIABLE_ORIGINAL_CI,
# GITHUB_ACTIONS..., which made these tests fail under `CI=1 tox -e cpu`).
OBSERVE = """
import json, os
from hypothesis import settings


def observe(name):
    # The example database lies under the run's folder: named relative to it, so that runs in
    # different folders compare.
    default = repr(settings.default).replace(os.getcwd(), "<run folder>")
    seen = {"profile": settings.get_current_profile_name(), "default": default}
    with open(os.path.join(os.environ["OBSERVED"], name + ".json"), "w") as file:
        json.dump(seen, file)
"""

CONFTEST = """
import pytest


def pytest_addoption(parser):
    parser.addoption("--flavour", default="plain")


@pytest.fixture(params=["fast", "slow"])
def backend(request):
    return request.param
"""

TESTS = """
import backends
from hypothesis import given, strategies as st
from observe import observe


def test_own_backend_fixture(backend, request):
    assert backend in ("fast", "slow") and backends.NAME == "mine"
    assert request.config.getoption("flavour") == "plain"


def test_hypothesis_settings_untouched():
    observe("test_hypothesis_settings_untouched")


@given(st.integers())
def test_given_runs(x):
    assert isinstance(x, int)
    observe("test_given_runs")
"""


@pytest.fixture
def project(tmp_path):
    """An unrelated project: its own ``backend`` fixture, ``backends`` package, Hypothesis tests."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "__init__.py").write_text('NAME = "mine"\n')
    (tmp_path / "test_project.py").write_text(textwrap.dedent(TESTS))
    (tmp_path / "observe.py").write_text(textwrap.dedent(OBSERVE))
    return tmp_path


def pytest_in(folder, *args, observed=None) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` in ``folder``, as a user there runs it: the folder first on
    sys.path (so its ``backends`` shadows opconform's), this checkout's packages after it, and the
    environment as it is here (CI and the like included: each comparison runs both sides in it).
    The project's tests write what they see into ``observed`` (a new folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    if observed is not None:
        observed.mkdir()
        env["OBSERVED"] = str(observed)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
               "-p", "no:randomly", *args]  # fmt: skip
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def observations(folder) -> dict[str, dict]:
    """test name -> what it saw of Hypothesis, as the project's ``observe`` wrote it."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


def counts(proc) -> dict[str, int]:
    """pytest's summary line as {outcome: count}."""
    line = proc.stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", line)}


def _observe_without_plugin(root) -> dict:
    """What a test sees of Hypothesis in a run without the plugin, in this environment: the same
    for every test of such a run (no project here sets a profile), so one run serves every
    comparison below."""
    (root / "observe.py").write_text(textwrap.dedent(OBSERVE))
    (root / "test_baseline.py").write_text("from observe import observe\n\n\ndef test_baseline():\n"
                                           "    observe('test_baseline')\n")  # fmt: skip
    proc = pytest_in(root, *WITHOUT_PLUGIN, "--trace-config", observed=root / "without")
    assert proc.returncode == 0 and counts(proc) == {"passed": 1}, proc.stdout + proc.stderr
    # The baseline really ran without this checkout's plugin.
    assert str(REPO / "conformance" / "harness" / "plugin.py") not in proc.stdout, proc.stdout
    return observations(root / "without")["test_baseline"]


@pytest.fixture
def without_plugin(tmp_path_factory) -> dict:
    return produced_once(tmp_path_factory, "opconform-no-plugin-observation", _observe_without_plugin)


def test_unrelated_project_runs_unchanged(project, without_plugin):
    """Its `backend` fixture was parametrized twice ("duplicate parametrization"), its Hypothesis
    defaults became the dev profile's, and its `backends` package an INTERNALERROR. Its 4 tests
    pass, and what they see of Hypothesis is what a test sees in a run without the plugin."""
    with_plugin = pytest_in(project, *WITH_PLUGIN, "-v", "--trace-config", observed=project / "with")
    assert with_plugin.returncode == 0, with_plugin.stdout + with_plugin.stderr
    assert counts(with_plugin) == {"passed": 4}
    seen = observations(project / "with")
    assert list(seen) == ["test_given_runs", "test_hypothesis_settings_untouched"], seen
    assert all(observed == without_plugin for observed in seen.values()), (seen, without_plugin)
    # This checkout's plugin was loaded (the baseline checks it was not there).
    assert str(REPO / "conformance" / "harness" / "plugin.py") in with_plugin.stdout, with_plugin.stdout


def test_suite_under_a_shadowing_backends_is_a_one_line_usage_error(project):
    """The suite asked for while the project's `backends` shadows opconform's: exit 4 naming it."""
    proc = pytest_in(project, *WITH_PLUGIN, "--pyargs", "conformance.test_norms", "--backend", "native")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "shadows it" in line]
    assert len(lines) == 1, proc.stderr
    assert str(project / "backends" / "__init__.py") in lines[0] and "'backends'" in lines[0], lines
    assert "INTERNALERROR" not in proc.stdout + proc.stderr


def test_unrelated_file_gets_no_parametrization_or_profile(tmp_path, without_plugin):
    """In opconform's own environment (its `backends` importable, no shadowing), a test file outside
    the suite that takes `backend` sees its own fixture and the Hypothesis profile it sees without
    the plugin, and the run imports none of backends, reference and torch."""
    (tmp_path / "observe.py").write_text(textwrap.dedent(OBSERVE))
    (tmp_path / "test_plain.py").write_text(
        textwrap.dedent("""
        import sys

        import pytest
        from observe import observe


        @pytest.fixture
        def backend():
            return "own"


        def test_plain(backend):
            assert backend == "own"
            observe("test_plain")
            # Nor torch: loading the plugin costs an unrelated run no torch import (seconds).
            assert not {"backends", "reference", "torch"} & set(sys.modules)
        """)
    )
    proc = pytest_in(tmp_path, *WITH_PLUGIN, "-v", "--trace-config", observed=tmp_path / "with")
    assert proc.returncode == 0 and counts(proc) == {"passed": 1}, proc.stdout + proc.stderr
    assert (
        "test_plain[" not in proc.stdout
        and str(REPO / "conformance" / "harness" / "plugin.py") in proc.stdout
    )
    seen = observations(tmp_path / "with")
    assert list(seen) == ["test_plain"] and seen["test_plain"] == without_plugin, (seen, without_plugin)


def test_unmarked_backend_argument_is_left_alone_in_a_suite_run(tmp_path, without_plugin):
    """In a run that asks for the suite (--backend native) and collects one of its modules, a
    user's own test that takes an argument named `backend` but is not marked clause/op keeps its
    own fixture, and the user's tests see the Hypothesis profile they see in a run of their own
    without the plugin: the suite's was loaded for the whole session once the plugin activated."""
    (tmp_path / "observe.py").write_text(textwrap.dedent(OBSERVE))
    (tmp_path / "test_own.py").write_text(
        textwrap.dedent("""
        import pytest
        from hypothesis import given, strategies as st
        from observe import observe


        @pytest.fixture
        def backend():
            return "own"


        def test_own(backend):
            assert backend == "own"
            observe("test_own")


        @given(st.integers())
        def test_own_given(x):
            observe("test_own_given")
        """)
    )
    report = tmp_path / "report.json"
    proc = pytest_in(tmp_path, *WITH_PLUGIN, "-v", "--backend", "native", f"--opconform-json={report}",
                     "--pyargs", "conformance.test_norms", "test_own.py",
                     "-k", "test_own or test_rms_norm_matches_oracle",
                     observed=tmp_path / "with")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert counts(proc).get("passed") == 3 and "failed" not in counts(proc), proc.stdout
    assert "test_own[" not in proc.stdout, proc.stdout
    # The suite's own default: opconform-ci where CI is set (docs/running.md, --hypothesis-profile), else dev.
    suite_profile = "opconform-ci" if os.environ.get("CI") else "opconform-dev"
    assert json.loads(report.read_text())["profile"] == suite_profile
    seen = observations(tmp_path / "with")
    assert list(seen) == ["test_own", "test_own_given"], seen
    assert all(observed == without_plugin for observed in seen.values()), (seen, without_plugin)


def test_profiles_do_not_inherit_the_environments_profile():
    """With CI set, Hypothesis loads its own "ci" (derandomized, 100 examples) at import; the
    suite's dev profile registered then inherited its derandomize instead of Hypothesis's default."""
    code = (
        "import conformance.harness.profiles, hypothesis; "
        "print(hypothesis.settings.get_profile('opconform-dev'))"
    )
    env = {**os.environ, "CI": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "derandomize=False" in proc.stdout and "max_examples=30" in proc.stdout, proc.stdout

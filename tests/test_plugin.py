"""The plugin through the real entry point: external backends, skips with reasons, xdist parity."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
from suite_runner import REPO, SelectionConfig, bad_mark_collection, outcomes, run_suite

from conformance.harness import selection

EXTERNAL_MODULE = """
from backends.native import NativeBackend


class ExternalNative(NativeBackend):
    name = "external-native"


class NeedsUnicorn(NativeBackend):
    name = "needs-unicorn"

    def unavailable(self, device):
        return "this backend needs a unicorn"


class NoOps:
    name = "no-ops"

    def unavailable(self, device):
        return None


BACKEND = ExternalNative()
ALL = [ExternalNative(), NeedsUnicorn(), NoOps()]
"""
SELECTION = ["conformance/test_activations.py", "-k", "geglu_matches_oracle or should_reject_bad_input"]


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """A directory outside the repository holding a user's backend module."""
    path = tmp_path_factory.mktemp("outside")
    (path / "user_backends.py").write_text(textwrap.dedent(EXTERNAL_MODULE))
    return path


@pytest.fixture(scope="module")
def serial(outside, tmp_path_factory):
    return run_suite(
        tmp_path_factory.mktemp("serial"),
        paths=SELECTION[:1],
        modules=["user_backends:ALL"],
        extra=[*SELECTION[1:], "--device", "cpu", "--device", "cuda", "--hypothesis-verbosity=quiet"],
        pythonpath=[outside],
    )


def test_default_attribute_is_BACKEND(outside, tmp_path):
    """--backend-module MODULE loads MODULE.BACKEND, selects only it, and it passes."""
    results = run_suite(
        tmp_path, paths=SELECTION[:1], modules=["user_backends"], extra=SELECTION[1:], pythonpath=[outside]
    )
    assert {e["backend"] for e in results["results"]} == {"external-native"}
    assert outcomes(results, "external-native") == {"passed": len(results["results"])}
    assert results["returncode"] == 0


def test_iterable_attribute_loads_every_backend(serial):
    """MODULE:ATTR may name an iterable of backends."""
    assert {e["backend"] for e in serial["results"]} == {"external-native", "needs-unicorn", "no-ops"}


def test_unavailable_backend_is_a_skip_with_its_reason(serial):
    """unavailable(device) -> reason becomes the skip reason, never a failure."""
    entries = [e for e in serial["results"] if e["backend"] == "needs-unicorn" and e["device"] == "cpu"]
    assert entries and all(e["outcome"] == "skipped" for e in entries)
    assert all("needs a unicorn" in e["reason"] for e in entries)


def test_missing_op_is_not_implemented(serial):
    """A backend without the op method is reported as not implemented."""
    entries = [e for e in serial["results"] if e["backend"] == "no-ops" and e["device"] == "cpu"]
    assert entries and all(e["outcome"] == "not implemented" for e in entries)


def test_absent_device_is_a_skip_with_its_reason(serial):
    """--device cuda on a machine without CUDA skips with the reason."""
    import torch

    entries = [e for e in serial["results"] if e["device"] == "cuda"]
    assert entries
    if not torch.cuda.is_available():
        assert all(e["outcome"] == "skipped" and "CUDA" in e["reason"] for e in entries)
        # Asked for by name, the absent device fails the run: plain pytest exits 6.
        assert serial["returncode"] == 6 and "requested device(s) absent: cuda" in serial["stdout"]
        assert list(serial["absent_devices"]) == ["cuda"]


def test_results_record_clauses(serial):
    """Every recorded case names its clauses."""
    assert all(e["clauses"] for e in serial["results"])
    assert {c for e in serial["results"] for c in e["clauses"]} == {"ACT-GEGLU", "ACT-ERRORS"}


def test_hypothesis_verbosity_survives_the_suites_profile(serial):
    """--hypothesis-verbosity with the short profile name ci: the suite loaded opconform-ci after
    Hypothesis had applied the verbosity to its own ci profile, and the verbosity was lost."""
    assert serial["profile"] == "opconform-ci-with-quiet-verbosity", serial["profile"]


def test_xdist_gives_the_serial_results(serial, outside, tmp_path):
    """`-n 2` gives the same outcome for every case as the serial run (ci profile is derandomized)."""
    parallel = run_suite(
        tmp_path,
        paths=SELECTION[:1],
        modules=["user_backends:ALL"],
        extra=[*SELECTION[1:], "--device", "cpu", "--device", "cuda", "-p", "xdist", "-n", "2"],
        pythonpath=[outside],
    )

    def table(doc):
        return {e["nodeid"]: e["outcome"] for e in doc["results"]}

    assert table(parallel) == table(serial)


# Each run: its arguments and words of its one error line. In one process (pytest.main per run),
# so the five usage errors cost one interpreter start and one import of torch.
BAD_RUNS = [
    (["--backend", "no-such-backend"], "--backend: unknown backend(s) ['no-such-backend']"),
    # -1 made every case of a correct backend FAIL with signal.itimer_error (issue 18, item 17).
    (["--opconform-timeout=-1"], "argument --opconform-timeout: '-1': expected a finite number of seconds"),
    (["--opconform-timeout=nan"], "argument --opconform-timeout: 'nan': expected a finite number of seconds"),
    (
        ["--opconform-backend-maxfail=-1"],
        "argument --opconform-backend-maxfail: '-1': expected a whole number",
    ),
    # A backend module with a syntax error (tests/misbehaving_import_error.py): one line, no traceback.
    (
        ["--backend-module", "misbehaving_import_error"],
        "ERROR: --backend-module misbehaving_import_error: importing it raised SyntaxError: invalid syntax "
        "(misbehaving_import_error.py, line 1)",
    ),
    # unavailable() raising was an error in every case, even of ops the backend does not implement.
    (
        ["--backend-module", "misbehaving_unavailable"],
        "backend 'raising-unavailable': unavailable('cpu') raised RuntimeError: driver not initialised",
    ),
    # A missing folder was a traceback after every case had run (exit 1, no report).
    (
        ["--opconform-json=/no/such/dir/r.json"],
        "--opconform-json /no/such/dir/r.json: cannot write there: no such",
    ),
]
RUN_EACH = """
import sys, pytest
for index, args in enumerate({runs!r}):
    code = pytest.main(["conformance/test_activations.py", "--co", "-q", "-p", "no:cacheprovider", *args])
    print(f"=== {{index}} exit {{int(code)}}", file=sys.stderr, flush=True)
"""


def test_bad_options_are_usage_errors_through_the_entry_point():
    """A bad option value stops a real run with pytest's usage-error exit status (4) and one line
    naming the option, before any case runs: never a verdict on the backend."""
    code = RUN_EACH.format(runs=[args for args, _ in BAD_RUNS])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parts = re.split(r"=== (\d+) exit (\d+)\n", proc.stderr)
    ends = {
        int(i): (int(c), text) for i, c, text in zip(parts[1::3], parts[2::3], parts[0:-1:3], strict=True)
    }
    for index, (args, words) in enumerate(BAD_RUNS):
        status, text = ends[index]
        assert status == 4 and "Traceback" not in text, (args, text)
        assert [line for line in text.splitlines() if words in line], (args, words, text)


@pytest.mark.parametrize("value", ["-1", "-0.5", "nan", "inf", "-inf", "", "2s", "1e999"])
def test_bad_time_limits_are_rejected(value):
    """--opconform-timeout / opconform run --timeout: anything but a finite number >= 0."""
    import argparse

    from conformance import options

    with pytest.raises(argparse.ArgumentTypeError, match="expected a finite number of seconds, 0 or more"):
        options.seconds(value)


def test_good_option_values_are_kept():
    """0 (none), fractions and huge limits (set as the timer's largest) are valid; so is maxfail 0."""
    import argparse

    from conformance import options
    from conformance.harness import time_limit

    assert [options.seconds(v) for v in ("0", "2.5", "1e12")] == [0.0, 2.5, 1e12]
    assert [options.count(v) for v in ("0", "1", "7")] == [0, 1, 7]
    for bad in ("-1", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number, 0 or more"):
            options.count(bad)
    assert time_limit.TIMER_MAX_SECONDS < 9.2e12  # setitimer's OverflowError starts past about 9.2e12 s
    assert options.unwritable(None) is None and options.unwritable(str(REPO / "x.json")) is None
    assert options.unwritable(str(REPO)) == "it is a directory"


def test_unknown_op_mark_fails_collection(tmp_path_factory):
    """An op mark naming an op outside backends.OPS is a collection error naming the test and the
    known ops, not a silent "not implemented" on every backend."""
    run = bad_mark_collection(tmp_path_factory)
    assert run["returncode"] == 2, run["output"]  # pytest: interrupted by collection errors
    output = run["errors"].get("test_typo.py", "")
    assert "test_typo.py::test_typo" in output, run["output"]
    assert "unknown op(s) [('gelu_and_mull',)]" in output, run["output"]
    assert "'gelu_and_mul'" in output and "'npu_geglu_args'" in output, run["output"]
    assert f"{len(run['errors'])} errors" in run["output"], run["output"]


@pytest.mark.parametrize(
    "options, select, words",
    [
        ({"backend": ["no-such-backend"]}, "backends", "unknown backend"),
        ({"backend_module": ["no_such_module_xyz"]}, "backends", "cannot import backend module"),
        ({"backend_module": ["json:nothing_here"]}, "backends", "has no attribute"),
        ({"device": ["tpu"]}, "devices", "unknown device"),
    ],
)
def test_bad_options_are_usage_errors(options, select, words):
    """Each bad option value is a pytest.UsageError naming the problem."""

    chooser = selection.backends if select == "backends" else selection.devices
    with pytest.raises(pytest.UsageError, match=words):
        chooser(SelectionConfig(**options))


@pytest.mark.parametrize(
    "source, words",
    [
        ("def broken(:\n", "--backend-module bad_mod: importing it raised SyntaxError: "),
        (
            "raise RuntimeError('no driver')\n",
            "--backend-module bad_mod: importing it raised RuntimeError: no driver",
        ),
        (
            "from backends.native import NativeBackend\n\nclass B(NativeBackend):\n    name = 'native'\n\n"
            "BACKEND = B()\n",
            "backend(s) ['native'] have the name of a built-in backend",
        ),
    ],
)
def test_bad_backend_modules_are_usage_errors(tmp_path, monkeypatch, source, words):
    """A module raising SyntaxError/RuntimeError on import was an INTERNALERROR; an external backend
    named like a built-in silently stood in for it. Both are usage errors naming the module."""

    (tmp_path / "bad_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bad_mod", raising=False)
    with pytest.raises(pytest.UsageError) as error:
        selection.backends(SelectionConfig(backend_module=["bad_mod"]))
    assert words in str(error.value) and "\n" not in str(error.value)


TWO_BACKENDS = """
class Mine:
    def __init__(self, name):
        self.name = name

    def unavailable(self, device):
        return None


BACKENDS = [Mine("mine-a"), Mine("mine-b")]
"""


@pytest.mark.parametrize(
    "names, selected",
    [([], ["mine-a", "mine-b"]), (["mine-b"], ["mine-b"]), (["native"], ["native", "mine-a", "mine-b"]),
     (["native", "mine-a"], ["native", "mine-a"])],
)  # fmt: skip
def test_backend_selects_among_a_modules_backends(tmp_path, monkeypatch, names, selected):
    """--backend mine-b beside a module of two backends ran both: it picks among the module's
    backends too; a module none of whose backends is named still runs beside the named ones."""
    (tmp_path / "two_backends.py").write_text(TWO_BACKENDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "two_backends", raising=False)
    config = SelectionConfig(backend=names, backend_module=["two_backends:BACKENDS"])
    assert [b.name for b in selection.backends(config)] == selected


def test_unknown_hypothesis_profile_is_a_usage_error():
    """--hypothesis-profile=nope was an INTERNALERROR traceback from Hypothesis's plugin (exit 3)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_activations.py", "--co", "-q",
         "-p", "no:cacheprovider", "--hypothesis-profile=nope"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 4 and "INTERNALERROR" not in proc.stderr, proc.stdout + proc.stderr
    assert "--hypothesis-profile: unknown profile 'nope'; known: [" in proc.stderr


@pytest.mark.parametrize(
    "actual, options, words",
    [
        (None, {}, "returned None; expected a tensor of shape (2, 3)"),
        ([1.0, 2.0], {}, "returned a list of 2 item(s); expected a tensor"),
        (
            "meta",
            {},
            "returned a meta tensor (no data): a tensor of shape (2, 3), dtype torch.float32 on meta",
        ),
        (
            "float64",
            {"dtype": "float32"},
            "dtype torch.float64 on cpu; expected a tensor of shape (2, 3), dtype ",
        ),
        ("float32", {"device": "cuda"}, "on cpu; expected a tensor of shape (2, 3) on cuda"),
    ],
)
def test_assert_close_names_a_wrong_return(actual, options, words):
    """An op returning None or a list was the suite's own AttributeError (failure.clause null); a
    meta tensor, a wrong dtype or device (when the property names them) passed or crashed. Each is
    now a one-line ConformanceError of the property's clause saying what came back."""
    import torch

    from conformance.checks import ConformanceError, assert_close

    if isinstance(actual, str):
        actual = torch.zeros(2, 3, dtype=getattr(torch, actual if actual != "meta" else "float32"),
                             device="meta" if actual == "meta" else "cpu")  # fmt: skip
    options = {k: getattr(torch, v) if k == "dtype" else v for k, v in options.items()}
    with pytest.raises(ConformanceError) as error:
        assert_close(
            actual, torch.zeros(2, 3, dtype=torch.float64), clause="ACT-GEGLU", context="op", **options
        )
    assert error.value.clause == "ACT-GEGLU" and words in str(error.value), str(error.value)
    assert "\n" not in str(error.value)


def test_entry_point_that_raises_is_a_usage_error(monkeypatch):
    """An installed entry point whose module raises on load was an INTERNALERROR."""
    import backends as registry

    def broken():
        raise RuntimeError("module-level init failed")

    monkeypatch.setattr(registry, "entry_point_backends", broken)
    with pytest.raises(pytest.UsageError, match="entry point raised RuntimeError: module-level init failed"):
        selection.backends(SelectionConfig())


def test_builtin_backends_are_not_asked_unavailable_before_the_run(monkeypatch):
    """The eager unavailable() check asks a user's backend, never a built-in: diffusers' imported
    diffusers (seconds) in every process of a run whose -k deselected its cases."""
    import backends as registry

    asked = []

    class Users:
        name = "users"

        def unavailable(self, device):
            asked.append(self.name)

    builtins = registry.builtin_backends()
    for backend in builtins:
        monkeypatch.setattr(type(backend), "unavailable", lambda self, device: asked.append(self.name))
    selection.check_unavailable([*builtins, Users()], ["cpu"])
    assert asked == ["users"], asked


def test_rerun_repeats_the_time_limit():
    """The rerun command of a case keeps --opconform-timeout, so rerunning a hung case cannot hang."""
    from conformance import rerun

    options = rerun.rerun_options(backend_modules=[], expectations=[], profile="ci", seed=None, timeout=2.5)
    assert "--opconform-timeout=2.5" in rerun.command("t.py::test_x", options)


def test_suite_cases_get_a_generous_default_time_limit():
    """Without --opconform-timeout a hanging op ended no run: the suite's cases get 300 s (3000 under
    thorough); a user's own test, --pdb and the debug profile none; the option wins, 0 for none."""
    from conformance.harness.time_limit import case_time_limit

    def limit(given=None, profile="opconform-ci", suite_case=True, debugging=False):
        return case_time_limit(given=given, profile=profile, suite_case=suite_case, debugging=debugging)

    assert limit() == limit(profile="opconform-dev") == limit(profile="someones-own") == 300
    assert limit(profile="opconform-thorough") == 3000
    assert limit(suite_case=False) is limit(debugging=True) is limit(profile="opconform-debug") is None
    assert limit(given=2.5) == 2.5 and limit(given=2.5, suite_case=False) == 2.5
    assert limit(given=0) is None

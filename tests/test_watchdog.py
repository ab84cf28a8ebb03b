"""A backend that hangs in native code or kills its worker, through `opconform run` as a user runs
it: the hang is ended from outside the worker and recorded as `timeout`, the crash as `crash`,
each with its seed, rerun line and thread stacks in a file of the report's folder; the run goes
on and every other case gets its result.

The hang is a C loop of ``pause()`` compiled here with the machine's C compiler and called through
ctypes: SIGALRM cannot interrupt it (the signal ends one pause, the loop pauses again, and Python's
handler would run only when the call returned; a libc ``sleep`` called from Python would not do: the
alarm interrupts it and the Python-level limit then works). It waits without using the CPU: a busy
loop held a core for the limit and grace, in the run and again in the rerun, about 9 CPU-s. No
assertion depends on the machine's speed; the subprocess timeout is only a safety net, so that a
watchdog that does not work fails the test instead of hanging it."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from suite_runner import produced_once

from opconform import report

REPO = Path(__file__).resolve().parent.parent
SAFETY_NET_SECONDS = 300
BLOCK_C = "#include <unistd.h>\nvoid opconform_block(void) { for (;;) pause(); }\n"
# blocked: gelu_and_mul waits in C for ever, rms_norm is native's. abort: rms_norm logs each input it
# is handed (pid, shape, sum) and aborts on its third call, so a rerun shows which examples it drew.
BACKENDS = """
import ctypes, os, pathlib

from backends.native import NativeBackend

HERE = pathlib.Path(__file__).parent
BLOCK = ctypes.CDLL(str(HERE / "libblock.so"))


class Blocked:
    name = "blocked"

    def unavailable(self, device):
        return None

    def gelu_and_mul(self, x, *, approximate):
        BLOCK.opconform_block()

    rms_norm = staticmethod(NativeBackend.rms_norm)


class Abort:
    name = "abort"
    calls = 0

    def unavailable(self, device):
        return None

    def rms_norm(self, x, weight, *, eps):
        Abort.calls += 1
        with open(HERE / "drawn.log", "a") as log:
            log.write(f"{os.getpid()} {tuple(x.shape)} {float(x.double().sum())!r}\\n")
        if Abort.calls == 3:
            os.abort()
        return NativeBackend.rms_norm(x, weight, eps=eps)


ALL = [Blocked(), Abort()]
"""
SELECTION = "test_geglu_matches_oracle or test_rms_norm_matches_oracle"
HUNG = "test_activations.py::test_geglu_matches_oracle[blocked-cpu]"
CRASHED = "test_norms.py::test_rms_norm_matches_oracle[abort-cpu]"
EXPECTED = {
    HUNG: "timeout",
    "test_activations.py::test_geglu_matches_oracle[abort-cpu]": "not implemented",
    "test_norms.py::test_rms_norm_matches_oracle[blocked-cpu]": "passed",
    CRASHED: "crash",
}


def _env(folder: Path, installed: Path | None) -> dict:
    """The environment of a run in ``folder``: its modules importable, and opconform's from
    ``installed`` (a site-packages folder) when given, else from the checkout."""
    path = [folder, installed or REPO]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, path), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _run(command: list[str], cwd: Path, installed: Path | None = None) -> subprocess.CompletedProcess:
    """``command`` in its own process group, ended whole (the blocked worker too) if it outlives
    the safety net: the test then fails instead of hanging."""
    proc = subprocess.Popen(command, cwd=cwd, env=_env(cwd, installed), text=True, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=SAFETY_NET_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"still running after {SAFETY_NET_SECONDS} s (the hang was not ended):\n{stdout[-3000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def _supervised_run(root: Path, compiler: str) -> dict:
    """One `opconform run --timeout 3 --profile dev` of the blocked and abort backends, into a folder
    that holds a stale stacks file of an earlier report: its folders and process outcome."""
    folder = root / "watchdog"
    folder.mkdir()
    (folder / "block.c").write_text(BLOCK_C)
    library, source = folder / "libblock.so", folder / "block.c"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O0", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    (folder / "hang_crash_backends.py").write_text(BACKENDS)
    # opconform as an installed suite (its modules under site-packages): Hypothesis draws some values
    # from constants of the loaded modules outside site-packages, and a rerun of one case loads
    # fewer of a checkout's modules than the run did (docs/running.md, Hangs and crashes).
    installed = root / "installed" / "site-packages"
    installed.mkdir(parents=True)
    for package in ("conformance", "backends", "reference", "opconform"):
        (installed / package).symlink_to(REPO / package, target_is_directory=True)
    out = folder / "out"
    (out / "report-crashes").mkdir(parents=True)
    (out / "report-crashes" / "stale.txt").write_text("stacks of an earlier run's crash")
    command = [sys.executable, "-m", "opconform.cli", "run", "--backend-module", "hang_crash_backends:ALL",
               "--device", "cpu", "--timeout", "3", "--profile", "dev", "--out", str(out),
               "--", "-k", SELECTION]  # fmt: skip
    started = time.monotonic()
    proc = _run(command, folder, installed)
    print(f"opconform run took {time.monotonic() - started:.1f} s")  # a figure, never asserted
    paths = {"folder": str(folder), "installed": str(installed), "out": str(out)}
    return {**paths, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


@pytest.fixture(scope="module")
def supervised(tmp_path_factory):
    """The watchdog run (``_supervised_run``), once per session: a worker that gets some of this
    module's tests reads the run another worker made instead of waiting out the hang again."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc) to build the blocking loop")
    if importlib.util.find_spec("xdist") is None:
        pytest.skip("pytest-xdist is not installed: no worker process to supervise")
    made = produced_once(tmp_path_factory, "opconform-watchdog", lambda root: _supervised_run(root, compiler))
    folder, installed, out = (Path(made[key]) for key in ("folder", "installed", "out"))
    proc = subprocess.CompletedProcess([], made["returncode"], made["stdout"], made["stderr"])
    assert (out / "report.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    document = report.load(out / "report.json")
    cases = {case["nodeid"]: case for case in document["results"]}
    if HUNG in cases:  # a figure, never asserted: the limit is 3 s
        print(f"the hung case was ended after {cases[HUNG]['duration']:.1f} s")
    run = SimpleNamespace(folder=folder, installed=installed, out=out, proc=proc)
    return SimpleNamespace(**vars(run), document=document, cases=cases)


def test_native_hang_is_a_timeout_and_the_run_goes_on(supervised):
    """A case blocked in C is ended from outside its worker (SIGALRM cannot stop it): a TIMEOUT cell
    naming the case, and a new worker runs the rest, so every case has its result."""
    run = supervised
    message = run.proc.stdout[-4000:] + run.proc.stderr[-2000:]
    assert {nodeid: case["outcome"] for nodeid, case in run.cases.items()} == EXPECTED, message
    hung = run.cases[HUNG]
    assert report.build_matrix(run.document).cell("ACT-GEGLU", "blocked@cpu").state == "timeout", message
    assert "per-case time limit of 3 s" in hung["failure"]["error"], hung["failure"]
    assert hung["failure"]["clause"] == "ACT-GEGLU" and hung["level"] == "MUST", hung
    later = [c for c in run.cases.values() if c["outcome"] == "passed" and c["start"] > hung["start"]]
    assert later, "no case ran after the hung one"
    assert f"opconform: TIMEOUT {HUNG}" in run.proc.stdout, message
    assert run.proc.returncode == 1, message


def _seeded(case: dict) -> int:
    """The seed the case's record gives, checked to be the one its rerun line repeats."""
    seed = case["failure"]["example"]["seed"]
    assert isinstance(seed, int), case["failure"]
    assert f"--hypothesis-seed={seed}" in shlex.split(case["failure"]["rerun"]), case["failure"]
    return seed


def _stacks(run, case: dict) -> str:
    """The stacks file the case's message names, inside the report's folder, named by every report."""
    line = next(line for line in case["failure"]["message"].splitlines() if line.startswith("thread stacks"))
    name = line.split(": ", 1)[1].split(" in the report's folder")[0]
    assert name.startswith("report-crashes/"), line
    for rendered in ("report.md", "report.html"):
        assert name in (run.out / rendered).read_text(), f"{rendered} does not name {name}"
    return (run.out / name).read_text()


def test_timeout_records_its_seed_rerun_and_stacks(supervised):
    """The ended case's record: the seed its examples were drawn with, a rerun line repeating it in
    one xdist worker (so the rerun is ended too), and its thread stacks at the end (the blocked
    frame among them) in a file the reports name."""
    run = supervised
    hung = run.cases[HUNG]
    _seeded(hung)
    assert "in gelu_and_mul" in _stacks(run, hung)
    rerun = shlex.split(hung["failure"]["rerun"])  # in a worker the watchdog ends again, not hanging
    assert "no:xdist" not in rerun and rerun[rerun.index("-n") + 1] == "1", rerun
    assert "--max-worker-restart=0" in rerun, rerun  # its one case done, no new worker to start


def test_timeout_rerun_as_printed_is_ended_too(supervised):
    """The ended case's rerun line, run as printed (plain pytest, its one xdist worker), is ended by
    the watchdog again and fails as a timeout, instead of hanging."""
    command = shlex.split(supervised.cases[HUNG]["failure"]["rerun"])
    proc = _run([sys.executable, *command[1:]], supervised.folder, supervised.installed)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"opconform: TIMEOUT {HUNG}" in proc.stdout and "1 failed" in proc.stdout, proc.stdout[-3000:]
    assert "replacing crashed worker" not in proc.stdout + proc.stderr, proc.stdout[-3000:]


def test_crash_records_its_seed_rerun_and_stacks_not_on_the_terminal(supervised):
    """A worker killed by its backend (os.abort): a crash with its seed, rerun line and cause, and
    the thread stacks in a file of the report's folder instead of a few hundred terminal lines; the
    stale stacks of the report this run replaced are gone."""
    run = supervised
    crashed = run.cases[CRASHED]
    _seeded(crashed)
    assert "Fatal Python error: Aborted" in crashed["failure"]["error"], crashed["failure"]
    assert "in rms_norm" in _stacks(run, crashed)
    assert "most recent call first" not in run.proc.stdout + run.proc.stderr, run.proc.stderr[-3000:]
    assert not (run.out / "report-crashes" / "stale.txt").exists()


def test_crash_rerun_draws_the_same_examples(supervised):
    """The crash's rerun line, run as printed, hands the backend the same inputs up to the crash."""
    run = supervised
    log = run.folder / "drawn.log"
    crashed_in = log.read_text().splitlines()
    log.unlink()
    command = shlex.split(run.cases[CRASHED]["failure"]["rerun"])
    _run([sys.executable, *command[1:]], run.folder, run.installed)  # "python" as printed: this interpreter
    drawn = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert len({pid for pid, _ in drawn}) == 1 and len(drawn) == 3, drawn
    assert [inputs for _, inputs in drawn] == [line.split(" ", 1)[1] for line in crashed_in[-3:]]


# Both runs in one interpreter (pytest.main each): one start of Python, torch and the suite's
# collection instead of two; each run's output ends with its exit line.
WITHOUT_XDIST = """
import sys, pytest
base = ["--pyargs", "conformance", "-p", "no:xdist", "-p", "no:cacheprovider", "--backend", "native",
        "--device", "cpu", "-k", "test_rms_norm_matches_oracle", "-q"]
for extra in ([], ["--opconform-timeout", "0"]):
    code = pytest.main([*base, *extra])
    print(f"=== exit {int(code)}", flush=True)
"""


def test_without_xdist_one_line_says_a_native_hang_cannot_be_interrupted(tmp_path):
    """A run of the suite's cases in pytest's own process says once that no watchdog runs; with no
    time limit (--opconform-timeout 0) there is nothing to say."""
    proc = _run([sys.executable, "-c", WITHOUT_XDIST], tmp_path)
    limited, limited_exit, unlimited, unlimited_exit, _ = re.split(r"=== exit (-?\d+)\n", proc.stdout)
    assert limited_exit == unlimited_exit == "0", proc.stdout[-3000:] + proc.stderr[-2000:]
    said = "a hang in native code cannot be interrupted"
    assert limited.count(said) == 1, limited[-2000:]
    assert said not in unlimited, unlimited[-2000:]

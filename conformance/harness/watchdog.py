"""The per-case time limit enforced from outside the worker, for a hang in native code.

SIGALRM (``conformance.harness.time_limit``) stops a case only when its thread comes back to Python: a
backend spinning in a C call (a driver deadlock) never does. In a distributed run (pytest-xdist:
``opconform run``, ``pytest -n N``) each worker writes a small side file when a case's call
starts (``CaseMarker``): its pid, the case, when it started, its limit, its facts, the seed of
its examples and its rerun line. The controller (``Supervisor``) reads them from a thread; a
case still running a grace past its limit (``grace``: SIGALRM had its chance) gets its worker
ended: its thread stacks are dumped first where the report has a folder. xdist then reports
the case as the dead worker's (``pytest_handlecrashitem``) and starts a new worker, and the run
goes on; the case is recorded as ``timeout``, a worker that died by itself as ``crash``
(``conformance.harness.crash_record``). Without xdist no process watches the cases: the plugin says so
in one line when the suite's cases are collected.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conformance import failure_record, rerun
from conformance.harness import activation, crash_record, failure_capture, recorder

SIDE_FOLDER = "opconform_side_folder"  # xdist workerinput key: where workers write their side files
# SIGALRM, in the worker, stops a case that returns to Python at its limit; the watchdog ends
# the worker a grace later (half the limit, within these bounds), so a Python-level hang keeps
# its example and its worker, and a short limit still ends a native hang within about 2x it.
GRACE_SECONDS = (1.0, 3.0)
POLL_SECONDS = 0.25
DUMP_WAIT_SECONDS = 1.0  # at most, between asking the worker for its stacks and ending it
# The signal a worker dumps its thread stacks on (faulthandler.register: POSIX only).
DUMP_SIGNAL = getattr(signal, "SIGUSR1", None)
NO_WATCHDOG = (
    "opconform: no worker process runs the cases (no pytest-xdist: -n 0, -p no:xdist, or not "
    "installed): the per-case time limit stops a case that returns to Python, but a hang in "
    "native code cannot be interrupted in this mode; run with -n 1 (`opconform run` does) to have "
    "a watchdog end it"
)


def _write(path: Path, entry: dict) -> None:
    """``entry`` as ``path``'s JSON, replaced at once (the watchdog never reads half a file). A file
    that cannot be written (a full disk; Windows, while the controller reads it) leaves that case
    unwatched rather than failing it."""
    partial = path.with_suffix(".partial")
    try:
        partial.write_text(json.dumps(entry, default=str), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):  # never leave a finished case's entry to be watched
            path.unlink(missing_ok=True)


def _read(path: Path) -> dict | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def grace(limit: float) -> float:
    """How long past its limit the watchdog lets a case run before it ends the worker."""
    low, high = GRACE_SECONDS
    return min(high, max(low, limit / 2))


def _until_written(path: Path, before: int) -> None:
    """Wait (at most ``DUMP_WAIT_SECONDS``) until faulthandler's dump to ``path`` has grown and stopped."""
    deadline, size = time.monotonic() + DUMP_WAIT_SECONDS, before
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = path.stat().st_size
        if before < now == size:
            return
        size = now


def case_seed(item) -> tuple[int | None, bool]:
    """The seed of ``item``'s Hypothesis examples, and whether this run chose it: ``--hypothesis-seed``
    or the test's own ``@seed``; a random one where Hypothesis would draw its own (chosen here so
    a case that kills its worker can be rerun on the same examples); None when derandomized (the
    profile alone repeats them) or not a Hypothesis test."""
    test = getattr(item, "obj", None)
    if not getattr(test, "is_hypothesis_test", False):
        return None, False
    given = item.config.getoption("hypothesis_seed", None)
    if given is not None:
        return (int(given) if str(given).isdigit() else given), False
    own = getattr(test, "_hypothesis_internal_use_seed", None)
    if own is not None:
        return own, False
    test_settings = getattr(test, "_hypothesis_internal_use_settings", None)
    if test_settings is None or test_settings.derandomize:
        return None, False
    return random.SystemRandom().randrange(2**32), True


class CaseMarker:
    """A worker's side: the side file of the case its call is running (``Supervisor`` reads it),
    and its faulthandler's output in a file of its own when the run writes a report."""

    def __init__(self, config, folder: Path):
        self.config = config
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.worker = config.workerinput["workerid"]
        self.path = folder / f"{self.worker}.json"
        self.limits = config.pluginmanager.get_plugin("opconform-time-limit")
        self.stacks = None
        if config.getoption("opconform_json"):
            self._redirect_stacks(folder / f"{self.worker}.stacks")

    def _redirect_stacks(self, path: Path) -> None:
        """faulthandler's thread stacks (a crash, or ``DUMP_SIGNAL`` from the watchdog) go to
        ``path``, which the controller copies beside the report, not to the terminal."""
        import faulthandler

        # Kept open: faulthandler writes to its file descriptor until the worker exits.
        self.stacks = open(path, "w", encoding="utf-8")
        faulthandler.enable(file=self.stacks, all_threads=True)
        if DUMP_SIGNAL is not None:
            faulthandler.register(DUMP_SIGNAL, file=self.stacks, all_threads=True)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item):
        seed, chosen = case_seed(item)
        test = getattr(item, "obj", None)
        if chosen:  # Hypothesis reads it at the start of the test (get_random_for_wrapped_test)
            test._hypothesis_internal_use_seed = seed
        params = getattr(getattr(item, "callspec", None), "params", {})
        example = failure_record.example(params, [], seed=seed)
        if example is None and seed is not None:
            example = {"test": None, "arguments": {}, "reproduce_failure": None, "seed": seed}
        if example is not None:
            example["test"] = getattr(item, "originalname", item.name)
        target = rerun.target_of(item.config, item.nodeid)
        options = item.config.stash.get(rerun.OPTIONS, []) + ([f"--hypothesis-seed={seed}"] if chosen else [])
        entry = {
            "pid": os.getpid(),
            "nodeid": item.nodeid,
            "location": item.location[0],  # names the file of a `--pyargs module::test` node id
            "started": time.time(),
            "limit": self.limits.limit_of(item) if self.limits is not None else None,
            "info": dict(item.user_properties).get(recorder.INFO),
            "example": example,
            "rerun": rerun.command(item.nodeid, options, target),
        }
        _write(self.path, entry)
        try:
            return (yield)
        finally:
            _write(self.path, {"pid": os.getpid(), "nodeid": None})
            if chosen:
                test._hypothesis_internal_use_seed = None


def activate(config) -> None:
    """At the plugin's activation: a worker of a supervised run starts writing its side files; the
    process writing the report drops the stacks files of the report it replaces."""
    if not hasattr(config, "workerinput"):
        crash_record.clear_stale(config.getoption("opconform_json"))
    folder = getattr(config, "workerinput", {}).get(SIDE_FOLDER)
    if folder and not config.pluginmanager.has_plugin("opconform-case-marker"):
        config.pluginmanager.register(CaseMarker(config, Path(folder)), "opconform-case-marker")


class Supervisor:
    """The controlling process's side: hands workers the side folder, ends a worker whose case
    overran, records a dead worker's case; in a run without xdist, the one line saying no
    watchdog runs. Registered in every pytest process but the workers; inert until the suite's
    workers write side files (its hooks are xdist's, called only in a distributed run)."""

    def __init__(self, config):
        self.config = config
        self.folder = Path(tempfile.gettempdir()) / f"opconform-side-{os.getpid()}-{os.urandom(4).hex()}"
        self.workers: dict = {}  # xdist worker id -> its WorkerController
        self.ended: dict[str, dict] = {}  # worker id -> the side entry of the case it was ended for
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        node.workerinput[SIDE_FOLDER] = str(self.folder)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node):
        self.workers[node.gateway.id] = node

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        """The workers collected: watch them if they write side files (they run the suite)."""
        if self.thread is None and self.folder.is_dir():
            self.thread = threading.Thread(target=self._watch, name="opconform-watchdog", daemon=True)
            self.thread.start()

    def _watch(self) -> None:
        while not self.stop.wait(POLL_SECONDS):
            for path in sorted(self.folder.glob("*.json")):
                entry = _read(path)
                if not entry or not entry.get("nodeid") or not entry.get("limit"):
                    continue
                if time.time() > entry["started"] + entry["limit"] + grace(entry["limit"]):
                    try:
                        self._end(path.stem, entry)
                    except OSError:  # the worker or its files went away meanwhile: nothing to end
                        continue

    def _end(self, worker: str, entry: dict) -> None:
        """End ``worker``, still running ``entry``'s case past its limit: its stacks first (where
        they go to a file), then SIGKILL. Only a worker process this run started on this machine."""
        node = self.workers.get(worker)
        process = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
        if process is None or process.pid != entry["pid"] or worker in self.ended:
            return
        if _read(self.folder / f"{worker}.json") != entry:  # it finished the case meanwhile
            return
        self.ended[worker] = entry
        stacks = self.folder / f"{worker}.stacks"
        if DUMP_SIGNAL is not None and stacks.exists() and process.poll() is None:
            before = stacks.stat().st_size
            process.send_signal(DUMP_SIGNAL)
            _until_written(stacks, before)
        process.kill()  # a no-op when the worker already died

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        """A worker died running ``crashitem``: ``timeout`` when the watchdog ended it for that case,
        else ``crash``; the case's facts from its side file (``crash_record.facts``). A run that
        neither activated the plugin nor had a worker collect the suite is left as it is."""
        if activation.state(self.config) is None and not self.folder.is_dir():
            return
        worker = getattr(getattr(report, "node", None), "gateway", None)
        worker = getattr(worker, "id", None)
        entry = _read(self.folder / f"{worker}.json") if worker else None
        entry = entry if entry and entry.get("nodeid") == crashitem else None
        ended = self.ended.pop(worker, None) if worker else None
        timed_out = ended is not None and ended.get("nodeid") == crashitem
        json_path = self.config.getoption("opconform_json", None)
        stacks = crash_record.keep_stacks(self.folder / f"{worker}.stacks", json_path, crashitem)
        info, case = crash_record.facts(
            self.config, crashitem, report.longreprtext, entry=entry, timed_out=timed_out, stacks=stacks
        )
        report.longrepr = "\n".join(failure_record.lines(case["failure"]))  # as a failure's record shows
        if entry is not None:  # xdist's report knows neither its file, nor when it started and ended
            report.location = (entry["location"], None, report.location[2])
            report.start, report.stop = entry["started"], time.time()
            report.duration = report.stop - report.start
        if activation.state(self.config) is not None:  # the recorder reads them
            report.user_properties = [*report.user_properties, (recorder.INFO, info), (recorder.CASE, case)]
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            shown = failure_capture.display_nodeid(crashitem, report.location[0])
            terminal.write_line(crash_record.terminal_line(shown, case, stacks), red=True, bold=True)
        if worker:  # its side file names the case it died in: never watch it again
            (self.folder / f"{worker}.json").unlink(missing_ok=True)

    def pytest_collection_finish(self, session):
        """A run of the suite's cases without xdist (never the controller, which collects nothing):
        one line saying a hang in native code cannot be interrupted."""
        config = session.config
        if activation.state(config) is None or config.option.collectonly:
            return
        limits = config.pluginmanager.get_plugin("opconform-time-limit")
        if config.pluginmanager.has_plugin("dsession") or limits is None:
            return
        if any(activation.is_suite_module(item.path) and limits.limit_of(item) for item in session.items):
            terminal = config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.write_line(NO_WATCHDOG, yellow=True)

    def pytest_unconfigure(self, config):
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        shutil.rmtree(self.folder, ignore_errors=True)

"""Ctrl-C during `opconform run`: the partial report is written, marked incomplete, exit status 4."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from opconform import render, report

REPO = Path(__file__).resolve().parent.parent
# rms_norm announces that it started (so the test interrupts a case in progress), then hangs.
HANGING_BACKEND = """
import pathlib, time

class Hanging:
    name = "hanging"

    def unavailable(self, device):
        return None

    def rms_norm(self, x, weight, *, eps):
        pathlib.Path("started").write_text("rms_norm")
        while True:
            time.sleep(3600)

BACKEND = Hanging()
"""


def _sigint_as_in_a_terminal() -> None:
    """In the run's process before exec: SIGINT's default action. A test session started in the
    background of a non-interactive shell (``cmd &``) passes SIGINT on as ignored, and a Python
    started with it ignored never raises KeyboardInterrupt: the run would hang there."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_writes_the_partial_report_marked_incomplete(tmp_path):
    """SIGINT to the run's process group (what Ctrl-C in a terminal does) while a case hangs: the
    cases that finished are in report.json with pytest's "interrupted" status, the text report
    says the run is incomplete, and opconform exits 4 (before: `subprocess.call` killed pytest)."""
    (tmp_path / "hanging_backend.py").write_text(HANGING_BACKEND)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "opconform.cli", "run", "--backend-module", "hanging_backend",
               "--device", "cpu", "--out", str(tmp_path / "out"), "--",
               "-k", "geglu_matches_oracle or rms_norm_matches_oracle"]  # fmt: skip
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True, text=True,
                            preexec_fn=_sigint_as_in_a_terminal,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (tmp_path / "started").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (tmp_path / "started").exists(), "the hanging case never started"
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 4, stdout[-3000:] + stderr[-3000:]
    assert "the run did not complete" in stderr, stderr[-3000:]
    document = report.load(tmp_path / "out" / "report.json")
    assert document["exitstatus"] == 2
    # gelu_and_mul ran before rms_norm (collection order): its case is kept, as "not implemented".
    outcomes = {(r["op"], r["outcome"]) for r in document["results"]}
    assert ("gelu_and_mul", "not implemented") in outcomes, outcomes
    assert "incomplete" in render.text(document).lower(), render.text(document)

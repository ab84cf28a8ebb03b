"""Real reports for the report self-tests, produced once per test session by ``opconform run``.

Two runs of the same small selection (three activation properties, backends ``native`` and the
test-local ``deviating``): ``declared`` with a manifest that declares deviating's GEGLU error,
plus an unexpected pass, an unsupported op and a stale entry; ``undeclared`` without it. Under
pytest-xdist the workers share one copy through a lock in the session's common temp directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
SELECTION = "geglu_matches or silu_and_mul_matches or swiglu_step_matches"

MANIFEST = """\
# The deviating backend's declared expectations (tests/report_runs.py).
backend = "deviating"

[[expect]]
clause = "ACT-GEGLU"
dtype = "float32"
reason = "deviation"
bound = 1.0
note = "GEGLU scaled by 1 + 1e-4"

[[expect]]
clause = "ACT-SWIGLU"
reason = "bug"
issue = "https://example.org/opconform/issues/1"
note = "declared but already fixed: an unexpected pass"

[[expect]]
test = "test_activations.py::test_swiglu_step_matches_oracle*"
reason = "unsupported"
note = "no clamped kernel"

[[expect]]
test = "test_activations.py::test_no_such_property*"
reason = "intermittent"
note = "matches nothing: stale"
"""


def opconform(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")])
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "conformance.cli", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _produce(root: Path) -> dict:
    manifest = root / "deviating.toml"
    manifest.write_text(MANIFEST)
    common = ["--backend", "native", "--backend-module", "report_backends", "--profile", "ci"]
    runs = {}
    for name, extra in (("declared", ["--expectations", str(manifest)]), ("undeclared", [])):
        started = time.perf_counter()
        proc = opconform("run", *common, *extra, "--out", str(root / name), "--", "-k", SELECTION, cwd=root)
        runs[name] = {
            "dir": str(root / name),
            "returncode": proc.returncode,
            "stdout": proc.stdout,
            "stderr": proc.stderr,
            "seconds": round(time.perf_counter() - started, 2),
        }
    runs["manifest"] = str(manifest)
    return runs


def shared_reports(tmp_path_factory) -> dict:
    """The runs' directories, exit codes and output; produced by the first worker that asks."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "opconform-report-runs"
    root.mkdir(exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        index = root / "runs.json"
        if not index.exists():
            index.write_text(json.dumps(_produce(root)))
        return json.loads(index.read_text())

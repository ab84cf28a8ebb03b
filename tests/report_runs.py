"""Real reports for the report self-tests, produced once per test session by ``opconform run``.

Two runs of the same small selection (three activation properties, backends ``native`` and the
test-local ``deviating``): ``declared`` with a manifest that declares deviating's GEGLU error,
plus an unexpected pass, an unsupported op and a stale entry; ``undeclared`` without it, and
with ``report_backends.BROKEN`` beside them (a numeric and a bad-input failure of one op, a
backend's own exception: the failure records), in the same process to save a start. Under
pytest-xdist the workers share one copy through a lock in the session's common temp directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from suite_runner import produced_once

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
SELECTION = "geglu_matches or silu_and_mul_matches or swiglu_step_matches"
# The BROKEN backends' failing properties only (what passes is checked with the other backends).
BROKEN_SELECTION = (
    "geglu_matches and accepting or silu_and_mul_matches and raising"
    " or should_reject_bad_input and (bad-approximate or odd-last-dim)"
)

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


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")])
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def opconform(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "opconform.cli", *args]
    return subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


def _produce(root: Path) -> dict:
    manifest = root / "deviating.toml"
    manifest.write_text(MANIFEST)
    # --device cpu: the expected cells are the CPU columns; on a CUDA host the default would add
    # cuda columns (found on the first GPU run).
    common = ["--backend", "native", "--backend-module", "report_backends", "--profile", "ci"]
    common += ["--device", "cpu", "-n", "0"]  # in this process: no case here needs a supervised worker
    started = time.perf_counter()
    procs = {}
    # The runs are independent: run them side by side (most of each is importing torch).
    undeclared = f"({SELECTION}) and (native or deviating) or {BROKEN_SELECTION}"
    broken = ["--backend-module", "report_backends:BROKEN"]
    for name, args in (
        ("declared", [*common, "--expectations", str(manifest), "--", "-k", SELECTION]),
        ("undeclared", [*common, *broken, "--", "-k", undeclared]),
    ):
        command = [sys.executable, "-m", "opconform.cli", "run", *args[: args.index("--")], "--out",
                   str(root / name), *args[args.index("--") :]]  # fmt: skip
        procs[name] = subprocess.Popen(
            command, cwd=root, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    runs = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        runs[name] = {"dir": str(root / name), "returncode": proc.returncode}
        runs[name].update(stdout=stdout, stderr=stderr)
    runs["seconds"] = round(time.perf_counter() - started, 2)
    runs["manifest"] = str(manifest)
    return runs


def shared_reports(tmp_path_factory) -> dict:
    """The runs' directories, exit codes and output; produced by the first worker that asks."""
    return produced_once(tmp_path_factory, "opconform-report-runs", _produce)

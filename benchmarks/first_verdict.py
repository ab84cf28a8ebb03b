"""How fast the first verdict comes: seconds from ``opconform run`` start to its first streamed
broken-clause line (conformance/harness/stream.py), against the floor of importing torch and collecting.

    python -m benchmarks.first_verdict [--first-failure] [--full] [--backend-module M --backend B]

Defaults to the four-bug module of the self-tests (tests/fourbug_backend.py, on the path from a
checkout). Each run starts in a fresh temporary folder (no Hypothesis example database to replay
from, as on a user's first run). Without ``--full`` the run is stopped once every op in
``ROOT_CAUSES`` has a streamed line (or the module has none: at the end). Prints figures only; no
timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.harness.stream import PREFIX

REPO = Path(__file__).resolve().parent.parent


def _env(path: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([path, str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def timed(command: list[str], env: dict, cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - started


def watch(command: list[str], env: dict, cwd: str, ops: set[str], full: bool) -> dict:
    """Run ``command``; the seconds of its first streamed line, of each op's first, and of its end."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    seen: dict[str, tuple[float, str]] = {}
    first = None
    for line in proc.stdout:
        if not line.startswith(PREFIX):
            continue
        now = time.perf_counter() - started
        first = first or (now, line.strip())
        clause, _, rest = line.removeprefix(PREFIX + " ").partition(": ")
        op = rest.split(",", 1)[0]
        seen.setdefault(op, (now, clause))
        if not full and ops and ops <= set(seen):
            os.killpg(proc.pid, signal.SIGINT)
            break
    proc.communicate()
    return {"first": first, "ops": seen, "end": time.perf_counter() - started, "stopped": not full}


def main(argv=None) -> int:
    description = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_verdict", description=description)
    parser.add_argument("--backend-module", default="fourbug_backend")
    parser.add_argument("--backend", default="fourbug")
    parser.add_argument("--path", default=str(REPO / "tests"), help="folder put on PYTHONPATH for the module")
    parser.add_argument("--first-failure", action="store_true", help="pass --first-failure to opconform run")
    parser.add_argument("--full", action="store_true", help="let the run finish")
    args = parser.parse_args(argv)
    env = _env(args.path)
    ops: set[str] = set()
    if args.backend_module == "fourbug_backend":
        sys.path.insert(0, args.path)
        from fourbug_backend import ROOT_CAUSES

        ops = set(ROOT_CAUSES)
    with tempfile.TemporaryDirectory(prefix="opconform-first-verdict-") as cwd:
        torch_s = timed([sys.executable, "-c", "import torch"], env, cwd)
        selection = [f"--backend-module={args.backend_module}", f"--backend={args.backend}", "--device=cpu"]
        collect = [sys.executable, "-m", "pytest", "--pyargs", "conformance", "-p", "no:cacheprovider",
                   "-p", "no:xdist", "--co", "-q", *selection]  # fmt: skip
        collect_s = timed(collect, env, cwd)
        run = [sys.executable, "-m", "opconform.cli", "run", "--backend-module", args.backend_module,
               "--backend", args.backend, "--device", "cpu", "--out", str(Path(cwd) / "out")]  # fmt: skip
        run += ["--first-failure"] if args.first_failure else []
        result = watch(run, env, cwd, ops, args.full)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"commit {commit.stdout.strip() or '?'}; python {sys.version.split()[0]}")  # fmt: skip
    print(f"floor: import torch {torch_s:.1f} s; pytest --co of the suite {collect_s:.1f} s")
    if result["first"] is None:
        print(f"no broken clause streamed; the run took {result['end']:.1f} s")
        return 0
    seconds, line = result["first"]
    print(f"first verdict: {seconds:.1f} s ({seconds / collect_s:.2f}x the collection floor): {line[:160]}")
    for op, (at, clause) in sorted(result["ops"].items(), key=lambda kv: kv[1][0]):
        print(f"  {at:6.1f} s  {op:24} {clause}")
    ended = "stopped after every op had its line" if result["stopped"] else "finished"
    print(f"run {ended} at {result['end']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

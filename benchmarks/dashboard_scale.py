"""How ``opconform dashboard`` scales: RUNS synthetic reports of a fleet, then the site built from them.

    python -m benchmarks.dashboard_scale --runs 300 --cases 3000 --out /tmp/fleet

The reports are results documents of this spec's clause table: MACHINES stacks (a product tuple
each, CUDA and Ascend), each run on one of them at a later date and commit, with CASES cases over
eight backends, a few skipped, n/i or SHOULD-failing, and now and then a MUST failure that comes and
goes (the regressions the site must show). Prints the build's seconds, the site's files and size.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from conformance.results import SCHEMA, VERSION
from conformance.spec_index import load_clauses

MACHINES = [
    {"chip": "H100", "driver": "550.54", "cuda": "12.4", "torch": "2.6.0"},
    {"chip": "H200", "driver": "560.35", "cuda": "12.6", "torch": "2.7.0"},
    {"chip": "Ascend910B3", "driver": "24.1.rc3", "cann": "8.3.RC1", "torch": "2.6.0", "torch_npu": "2.6.0"},
    {"chip": "Ascend910B3", "driver": "25.0.rc1", "cann": "8.5.RC1", "torch": "2.7.0", "torch_npu": "2.7.0"},
    {"chip": "Ascend310P3", "driver": "24.1.rc3", "cann": "8.3.RC1", "torch": "2.6.0", "torch_npu": "2.6.0"},
    {"chip": "cpu", "torch": "2.13.0"},
]
BACKENDS = ["native", "compiled", "flex", "transformers", "npu", "npu-emulated", "invariant", "acme"]


def report(index: int, cases: int, clauses: dict, rng: random.Random) -> dict:
    machine = MACHINES[index % len(MACHINES)]
    device = "npu" if "cann" in machine else ("cpu" if machine["chip"] == "cpu" else "cuda")
    ids = list(clauses)
    results = []
    for k in range(cases):
        backend, clause = BACKENDS[k % len(BACKENDS)], ids[(k // len(BACKENDS)) % len(ids)]
        family, level = clauses[clause]["family"], clauses[clause]["level"]
        nodeid = f"conformance/test_{family}.py::test_{clause.lower()}_{k}[{backend}-{device}]"
        case = {"nodeid": nodeid, "outcome": "passed", "backend": backend, "device": device,
                "clauses": [clause], "level": level, "op": "op", "duration": 0.01}  # fmt: skip
        kind = random.Random(k).random()  # a case's usual state: the same in every run
        if kind < 0.15:
            case.update(outcome="not implemented", reason=f"not implemented: backend '{backend}' has no op")
        elif kind < 0.2:
            case.update(outcome="skipped", reason="unsupported dtype on this device")
        elif level == "SHOULD" and kind < 0.3:
            case.update(
                outcome="failed (SHOULD)", failure={"clause": clause, "message": f"[{clause}] bad input"}
            )
        elif rng.random() < 0.0005:  # a MUST failure of this run only
            rerun = f"python -m pytest --pyargs '{nodeid.replace('/', '.').replace('.py::', '::')}'"
            failure = {"clause": clause, "message": f"[{clause}] got 1, expected 2", "rerun": rerun}
            case.update(outcome="failed", failure=failure)
        results.append(case)
    created = f"2026-{1 + index // 28 % 12:02d}-{1 + index % 28:02d}T{index % 24:02d}:00:00+00:00"
    return {
        "schema": SCHEMA, "version": VERSION, "created": created, "host": f"runner-{index % 4}",
        "product": {**machine, "python": "3.11.7", "commit": f"{index:07x}", "host": f"runner-{index % 4}"},
        "backends": BACKENDS, "devices": [device], "duration": 60.0, "exitstatus": 0,
        "clauses": clauses, "expectations": [], "results": results,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument(
        "--out", type=Path, required=True, help="an empty folder: reports/ and site/ go there"
    )
    args = parser.parse_args()
    clauses = {c.id: c.record() for c in load_clauses().values()}
    rng = random.Random(0)
    reports = args.out / "reports"
    reports.mkdir(parents=True)
    paths = []
    for index in range(args.runs):
        paths.append(reports / f"run-{index:03d}.json")
        paths[-1].write_text(json.dumps(report(index, args.cases, clauses, rng)))
    size = sum(p.stat().st_size for p in paths)
    print(f"{args.runs} reports of {args.cases} cases: {size / 1e6:.1f} MB")
    from opconform import cli

    started = time.perf_counter()
    status = cli.main(["dashboard", *map(str, paths), "--out", str(args.out / "site")])
    print(f"exit {status}, {time.perf_counter() - started:.1f} s wall for the whole command")


if __name__ == "__main__":
    main()

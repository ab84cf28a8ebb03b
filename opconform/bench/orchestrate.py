"""The bench's orchestration: which cases and implementations run where, and the JSON document.

For each case of ``benchmarks.cases`` (an op at a shape from SANA or Step-3.5-Flash) and each
present device it runs the oracle, every selected backend that has the op and the case's peer
(e.g. ``transformers``' mask builder, ``diffusers``' scheduler, SDPA with a float mask), each
measured by ``opconform.bench.measure`` (in a fresh worker process unless inline); then the
ratios to ``native`` and to the peer, and the oracle targets' verdicts.

Timing: on CPU only ratios measured in the same run are meaningful (to ``native`` and to the
case's peer); absolute times are printed only for GPU/NPU (and for the oracle targets, whose
limits are absolute). Memory: see ``opconform.bench.measure.MEMORY_METHODS``.
"""

from __future__ import annotations

import os
import platform
import time
import warnings
from collections.abc import Sequence

import torch

import backends as registry
from benchmarks import cases as bench_cases
from conformance.devices import KNOWN_DEVICE_TYPES, absent_reason
from conformance.signatures import start_folder_on_path
from opconform.bench.measure import (
    MEMORY_METHODS,
    ORACLE,
    Impl,
    measure,
    oracle_function,
    peer_objects,
    run_isolated,
    warning_lines,
)
from opconform.bench.output import BASELINE

JSON_SCHEMA = "opconform-bench"
JSON_VERSION = 1
DTYPES = ("bfloat16", "float16", "float32", "float64")
# Presets, one per shape set (not Hypothesis profiles): warm-up calls, timed repeats (at most),
# at least, seconds per impl, timeout.
PRESETS = {
    "full": {"warmup": 2, "repeats": 10, "min_repeats": 3, "budget_s": 30.0, "timeout_s": 1800.0},
    "quick": {"warmup": 2, "repeats": 3, "min_repeats": 2, "budget_s": 2.0, "timeout_s": 120.0},
}


class BenchUsageError(ValueError):
    """Bad options: reported with the option's name and exit status 2."""


def select_impls(
    backend_names: Sequence[str], backend_modules: Sequence[str], peers: Sequence[str] = ()
) -> tuple[list[Impl], list[dict]]:
    """The oracle, the selected backends (all without ``backend_names``) and, beside a selection,
    the cases' ``peers`` as comparators; plus records for backends that failed to load."""
    impls = [Impl(ORACLE, "oracle", ("oracle",))]
    broken: list[dict] = []
    candidates: list[Impl] = []
    for name, target in registry.BUILTIN.items():
        try:
            obj = registry.check_backend(registry.import_attr(target), f"built-in {name}")
        except (registry.BackendError, ImportError) as exc:
            broken.append({"impl": name, "reason": f"cannot load backend: {exc}"})
            continue
        candidates.append(Impl(obj.name, "backend", ("builtin", target), obj))
    try:
        for ep_backend in registry.entry_point_backends():
            candidates.append(Impl(ep_backend.name, "backend", ("entry-point", ep_backend.name), ep_backend))
        folder = os.getcwd()
        start_folder_on_path(folder)  # a module beside the user, as `python -m` and `opconform run` find it
        for spec in backend_modules:
            for obj in registry.load_backend_module(spec):
                candidates.append(Impl(obj.name, "backend", ("module", spec, obj.name, folder), obj))
    except registry.BackendError as exc:
        raise BenchUsageError(f"--backend-module: {exc}") from exc
    candidates += [Impl(p.name, "peer", ("peer", p.name), p) for p in peer_objects()]
    by_name = {i.name: i for i in reversed(candidates)}  # first of a name wins
    oracle_only = bool(backend_names) and all(n == ORACLE for n in backend_names)
    backend_names = [n for n in backend_names if n != ORACLE]  # the oracle always runs
    if oracle_only:
        chosen = []
    elif backend_names:
        known = sorted(by_name) + [b["impl"] for b in broken]
        unknown = [n for n in backend_names if n not in known]
        if unknown:
            raise BenchUsageError(f"--backend: unknown backend(s) {unknown}; known: {sorted(known)}")
        broken = [b for b in broken if b["impl"] in backend_names]
        chosen = [by_name[n] for n in dict.fromkeys(backend_names) if n in by_name]
        chosen += [  # each case's peer still runs as its comparator, like the oracle
            Impl(i.name, i.kind, i.locator, i.obj, comparator=True)
            for i in (by_name[n] for n in dict.fromkeys(peers) if n in by_name and n not in backend_names)
        ]
    else:
        chosen = [by_name[name] for name in dict.fromkeys(i.name for i in candidates)]
    return impls + chosen, broken


def skip_reason(case: bench_cases.Case, impl: Impl, device: torch.device) -> tuple[str, str] | None:
    """(status, reason) when ``impl`` cannot run ``case`` on ``device``; None when it can."""
    if impl.kind == "oracle":
        try:
            oracle_function(case)
        except (ImportError, AttributeError) as exc:  # a family's oracle module that cannot be imported
            return "skipped", f"oracle cannot be imported: {exc}"
        return None
    reason = registry.not_implemented_reason(impl.obj, case.op)
    if reason:
        return "not-implemented", reason
    if getattr(impl.obj, "clause_scope", None) is not None:  # a reference for some clauses (`invariant`)
        return "skipped", f"backend {impl.name!r} is a reference for its clause_scope, not a kernel to time"
    try:
        reason = impl.obj.unavailable(device)
    except Exception as exc:  # a backend's availability probe must not stop the bench
        reason = f"unavailable() raised {type(exc).__name__}: {exc}"
    return ("skipped", reason) if reason else None


# --- the run -----------------------------------------------------------------------------------


def _ratio(value, base):
    return None if value is None or not base else value / base


def add_ratios(results: list[dict]) -> None:
    """Fill ratio_to_oracle, ratio_to_native and ratio_to_peer from rows of the same case and device
    (None where that row did not run: an external backend alone still gets the oracle's and the peer's)."""
    medians = {(r["case"], r["device"], r["impl"]): r.get("median_s") for r in results if r["status"] == "ok"}
    for row in results:
        key = (row["case"], row["device"])
        peer = medians.get((*key, row["peer"])) if row["peer"] else None
        row["ratio_to_oracle"] = _ratio(row.get("median_s"), medians.get((*key, ORACLE)))
        row["ratio_to_native"] = _ratio(row.get("median_s"), medians.get((*key, BASELINE)))
        row["ratio_to_peer"] = _ratio(row.get("median_s"), peer)


def evaluate_targets(results: list[dict], selected: list[bench_cases.Case], shape_set: str) -> list[dict]:
    """The oracle's measured time and peak against its target (docs/performance.md), per device."""
    out = []
    for case in selected:
        if case.target is None:
            continue
        rows = [r for r in results if r["case"] == case.id and r["impl"] == ORACLE]
        for row in rows or [{"device": None, "status": "not-run", "reason": "oracle not selected"}]:
            entry = {
                "case": case.id,
                "device": row["device"],
                "target_s": case.target.seconds,
                "target_peak_bytes": case.target.peak_bytes,
                "measured_s": row.get("median_s"),
                "measured_peak_bytes": row.get("peak_bytes"),
            }
            if shape_set != "full":
                entry["verdict"], entry["reason"] = (
                    "not-evaluated",
                    "targets apply to the full shapes, not --quick",
                )
            elif row["status"] != "ok":
                entry["verdict"], entry["reason"] = "not-run", f"{row['status']}: {row.get('reason')}"
            else:
                met = row["median_s"] <= case.target.seconds
                if case.target.peak_bytes is not None:
                    met = met and row["peak_bytes"] <= case.target.peak_bytes
                entry["verdict"] = "met" if met else "missed"
            out.append(entry)
    return out


def evaluate_relative_targets(
    results: list[dict], selected: list[bench_cases.Case], shape_set: str
) -> list[dict]:
    """The oracle's time and peak on a case over those on its relative target's baseline case, per device."""
    oracle = {(r["case"], r["device"]): r for r in results if r["impl"] == ORACLE}
    out = []
    for case in selected:
        if case.relative_target is None:
            continue
        baseline, limit = case.relative_target.baseline, case.relative_target.ratio
        for device in dict.fromkeys(r["device"] for r in results if r["case"] == case.id) or [None]:
            row, base = oracle.get((case.id, device), {}), oracle.get((baseline, device), {})
            entry = {
                "case": case.id,
                "baseline": baseline,
                "device": device,
                "target_ratio": limit,
                "measured_s": row.get("median_s"),
                "baseline_s": base.get("median_s"),
                "measured_peak_bytes": row.get("peak_bytes"),
                "baseline_peak_bytes": base.get("peak_bytes"),
            }
            entry["time_ratio"] = _ratio(entry["measured_s"], entry["baseline_s"])
            entry["peak_ratio"] = _ratio(entry["measured_peak_bytes"], entry["baseline_peak_bytes"])
            if shape_set != "full":
                entry["verdict"], entry["reason"] = (
                    "not-evaluated",
                    "targets apply to the full shapes, not --quick",
                )
            elif row.get("status") != "ok" or base.get("status") != "ok":
                entry["verdict"], entry["reason"] = "not-run", "the oracle did not run on both cases"
            elif entry["time_ratio"] is None or entry["peak_ratio"] is None:
                entry["verdict"], entry["reason"] = "not-evaluated", "the baseline measured 0 time or memory"
            else:
                entry["verdict"] = (
                    "met" if max(entry["time_ratio"], entry["peak_ratio"]) <= limit else "missed"
                )
            out.append(entry)
    return out


def select_cases(shape_set: str, patterns: Sequence[str]) -> list[bench_cases.Case]:
    """Cases whose id contains a pattern (all without patterns; at --quick, the first case of each op),
    each with the baseline case of its relative target."""
    every = bench_cases.cases(shape_set)
    chosen = every
    if shape_set == "quick" and not patterns:
        chosen = list({c.op: c for c in reversed(chosen)}.values())[::-1]
    if patterns:
        chosen = [c for c in chosen if any(p in c.id for p in patterns)]
        if not chosen:
            raise BenchUsageError(
                f"--case: no case id contains any of {list(patterns)}; "
                f"known: {[c.id for c in bench_cases.CASES]}"
            )
    wanted = {c.id for c in chosen} | {c.relative_target.baseline for c in chosen if c.relative_target}
    return [c for c in every if c.id in wanted]


def run_bench(
    *,
    shape_set: str = "full",
    case_patterns: Sequence[str] = (),
    backend_names: Sequence[str] = (),
    backend_modules: Sequence[str] = (),
    devices: Sequence[str] = (),
    dtype: str = "bfloat16",
    warmup: int | None = None,
    repeats: int | None = None,
    budget_s: float | None = None,
    timeout_s: float | None = None,
    isolation: str | None = None,
    progress=None,
) -> dict:
    """Run the bench and return the JSON document (see README "Performance" for the schema)."""
    if shape_set not in PRESETS:
        raise BenchUsageError(f"shape_set must be one of {tuple(PRESETS)}, got {shape_set!r}")
    if dtype not in DTYPES:
        raise BenchUsageError(f"--dtype must be one of {DTYPES}, got {dtype!r}")
    if isolation is None:
        isolation = "inline" if shape_set == "quick" else "process"
    if isolation not in ("process", "inline"):
        raise BenchUsageError(f"--isolation must be 'process' or 'inline', got {isolation!r}")
    unknown = [d for d in devices if d not in KNOWN_DEVICE_TYPES]
    if unknown:
        raise BenchUsageError(f"--device: unknown device(s) {unknown}; expected some of {KNOWN_DEVICE_TYPES}")
    preset = dict(PRESETS[shape_set])
    for key, value in (
        ("warmup", warmup),
        ("repeats", repeats),
        ("budget_s", budget_s),
        ("timeout_s", timeout_s),
    ):
        if value is not None:
            preset[key] = value
    preset["min_repeats"] = min(preset["min_repeats"], preset["repeats"])
    selected = select_cases(shape_set, case_patterns)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        impls, broken = select_impls(backend_names, backend_modules, [c.peer for c in selected if c.peer])
        device_names = list(dict.fromkeys(devices or KNOWN_DEVICE_TYPES))
        absent = {d: why for d in device_names if (why := absent_reason(d))}
        device_names = [d for d in device_names if d not in absent]  # no rows: `absent_devices` says it
        results = _measure_all(selected, impls, broken, device_names, backend_names, shape_set, dtype,
                               isolation, preset, progress)  # fmt: skip
    add_ratios(results)
    found = [f"{r['impl']}: {line}" for r in results for line in r.get("warnings", [])]
    found += [f"bench: {line}" for line in warning_lines(caught)]
    return {
        "schema": JSON_SCHEMA,
        "version": JSON_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "shape_set": shape_set,
        "dtype": dtype,
        "isolation": isolation,
        "settings": preset,
        "devices": device_names,
        "absent_devices": {d: why for d, why in absent.items() if d in devices},
        "warnings": list(dict.fromkeys(found)),
        "baseline": BASELINE,
        "memory_methods": MEMORY_METHODS,
        "timing_note": "median of the timed calls after warm-up; on cpu compare only ratios from one run",
        "duration_s": round(time.perf_counter() - started, 3),
        "cases": [
            {
                "id": c.id,
                "op": c.op,
                "family": c.family,
                "source": c.source,
                "params": c.params,
                "peer": c.peer,
            }
            for c in selected
        ],
        "results": results,
        "targets": evaluate_targets(results, selected, shape_set),
        "relative_targets": evaluate_relative_targets(results, selected, shape_set),
    }


def _measure_all(selected, impls, broken, device_names, backend_names, shape_set, dtype, isolation,
                 preset, progress) -> list[dict]:  # fmt: skip
    """Every (device, case, implementation) row: measured, or skipped with its reason."""
    results: list[dict] = []
    for device_name in device_names:
        device = torch.device(device_name)
        for case in selected:
            base = {
                "case": case.id,
                "op": case.op,
                "family": case.family,
                "device": device_name,
                "peer": case.peer,
                "params": case.params,
                "time_is_absolute": device_name != "cpu",
            }
            for impl in impls:
                if impl.comparator and impl.name != case.peer:
                    continue
                row = {**base, "impl": impl.name, "kind": impl.kind}
                skip = skip_reason(case, impl, device)
                if skip:
                    row["status"], row["reason"] = skip
                else:
                    if progress:
                        progress(f"bench {case.id} [{device_name}] {impl.name} ...")
                    task = {
                        "case": case.id,
                        "shape_set": shape_set,
                        "device": device_name,
                        "dtype": dtype,
                        "locator": impl.locator,
                        "inline": isolation == "inline",
                        **{k: preset[k] for k in ("warmup", "repeats", "min_repeats", "budget_s")},
                    }
                    if isolation == "inline":
                        try:
                            row.update(measure(task))
                        except Exception as exc:
                            row.update(status="error", reason=f"{type(exc).__name__}: {exc}"[:2000])
                    else:
                        row.update(run_isolated(task, timeout_s=preset["timeout_s"]))
                results.append(row)
            for entry in broken:
                results.append(
                    {
                        **base,
                        "impl": entry["impl"],
                        "kind": "backend",
                        "status": "skipped",
                        "reason": entry["reason"],
                    }
                )
            known = {i.name for i in impls} | {b["impl"] for b in broken}
            oracle_only = bool(backend_names) and all(n == ORACLE for n in backend_names)
            if case.peer and case.peer not in known and not oracle_only:
                reason = f"peer {case.peer!r} is not a registered backend here"
                results.append(
                    {**base, "impl": case.peer, "kind": "peer", "status": "skipped", "reason": reason}
                )
    return results

"""``opconform bench``: time and measure every op on every backend, device and the oracle.

Usage: ``python -m conformance.bench [--quick] [--case SUBSTR] [--backend NAME] [--device cpu]
[--json PATH] [--chart PATH]`` (``--help`` for all options, ``--list`` for the cases).

For each case of ``benchmarks.cases`` (an op at a shape from SANA or Step-3.5-Flash) and each
present device it runs the oracle, every selected backend that has the op and the case's peer
(e.g. ``transformers``' mask builder, ``diffusers``' scheduler, SDPA with a float mask), each
in a fresh worker process: warm-up, then repeated timed calls (median reported), and the peak
memory of the timed calls. It prints a table, writes JSON and a PNG chart of the ratios.

Timing: on CPU only ratios measured in the same run are meaningful (to ``native`` and to the
case's peer); absolute times are printed only for GPU/NPU (and for the oracle targets, whose
limits are absolute). Memory: see ``MEMORY_METHODS``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

import backends as registry
from benchmarks import cases as bench_cases
from conformance.devices import KNOWN_DEVICE_TYPES, absent_reason

__all__ = ["JSON_SCHEMA", "TABLE_COLUMNS", "MEMORY_METHODS", "main", "run_bench"]

JSON_SCHEMA = "opconform-bench"
JSON_VERSION = 1
TABLE_COLUMNS = ("case", "device", "impl", "time", "x native", "x peer", "peak mem", "status")
ORACLE = "oracle"
BASELINE = "native"
DTYPES = ("bfloat16", "float16", "float32", "float64")

MEMORY_METHODS = {
    "cpu": "peak RSS of the timed calls in a fresh worker process: Linux VmHWM after resetting it "
    "(/proc/self/clear_refs = 5) once inputs exist and warm-up ran, minus VmRSS at the reset; "
    "glibc's mmap threshold is pinned to 64 KiB so freed tensors leave RSS",
    "cpu-fallback": "ru_maxrss minus RSS after input creation (VmHWM could not be reset; an upper bound)",
    "accelerator": "torch.<device>.max_memory_allocated() after reset_peak_memory_stats(), minus "
    "memory_allocated() once inputs exist (tensor memory only, not the caching allocator's reserve)",
    "inline": "as for the device, but in the bench process itself (--isolation inline): indicative only",
}

# Options per shape set: warm-up calls, timed repeats (at most), at least, seconds per impl, timeout.
PROFILES = {
    "full": {"warmup": 2, "repeats": 10, "min_repeats": 3, "budget_s": 30.0, "timeout_s": 1800.0},
    "quick": {"warmup": 2, "repeats": 3, "min_repeats": 2, "budget_s": 2.0, "timeout_s": 120.0},
}


class BenchUsageError(ValueError):
    """Bad options: reported with the option's name and exit status 2."""


# --- implementations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Impl:
    """Something that runs a case: the oracle, a backend or a bench peer."""

    name: str
    kind: str  # "oracle", "backend", "peer"
    locator: tuple  # how a worker process finds it again (picklable)
    obj: object = None  # the backend object (parent side only)


def _peer_objects() -> list:
    from benchmarks.peers import PEERS

    return list(PEERS)


def select_impls(
    backend_names: Sequence[str], backend_modules: Sequence[str]
) -> tuple[list[Impl], list[dict]]:
    """The oracle, the selected backends and the peers; plus records for backends that failed to load."""
    impls = [Impl(ORACLE, "oracle", ("oracle",))]
    broken: list[dict] = []
    candidates: list[Impl] = []
    for name, target in registry.BUILTIN.items():
        try:
            obj = registry._check_backend(registry._import_attr(target), f"built-in {name}")
        except (registry.BackendError, ImportError) as exc:
            broken.append({"impl": name, "reason": f"cannot load backend: {exc}"})
            continue
        candidates.append(Impl(obj.name, "backend", ("builtin", target), obj))
    try:
        for ep_backend in registry.entry_point_backends():
            candidates.append(Impl(ep_backend.name, "backend", ("entry-point", ep_backend.name), ep_backend))
        for spec in backend_modules:
            for obj in registry.load_backend_module(spec):
                candidates.append(Impl(obj.name, "backend", ("module", spec, obj.name), obj))
    except registry.BackendError as exc:
        raise BenchUsageError(f"--backend-module: {exc}") from exc
    candidates += [Impl(p.name, "peer", ("peer", p.name), p) for p in _peer_objects()]
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
    else:
        chosen = [by_name[name] for name in dict.fromkeys(i.name for i in candidates)]
    return impls + chosen, broken


def _locate(locator: tuple):
    kind = locator[0]
    if kind == "builtin":
        return registry._import_attr(locator[1])
    if kind == "entry-point":
        return next(b for b in registry.entry_point_backends() if b.name == locator[1])
    if kind == "module":
        return next(b for b in registry.load_backend_module(locator[1]) if b.name == locator[2])
    if kind == "peer":
        return next(p for p in _peer_objects() if p.name == locator[1])
    raise ValueError(f"unknown implementation locator {locator!r}")


def oracle_function(case: bench_cases.Case):
    """The oracle callable for a case; raises ImportError/AttributeError when its code is absent."""
    module = importlib.import_module(case.oracle_module)
    return getattr(module, case.oracle_attr or case.op)


def skip_reason(case: bench_cases.Case, impl: Impl, device: torch.device) -> tuple[str, str] | None:
    """(status, reason) when ``impl`` cannot run ``case`` on ``device``; None when it can."""
    if impl.kind == "oracle":
        try:
            oracle_function(case)
        except ImportError as exc:
            return "skipped", f"oracle not on this branch: {exc}"
        except AttributeError as exc:
            return "skipped", f"oracle not on this branch: {exc}"
        return None
    reason = registry.not_implemented_reason(impl.obj, case.op)
    if reason:
        return "not-implemented", reason
    try:
        reason = impl.obj.unavailable(device)
    except Exception as exc:  # a backend's availability probe must not stop the bench
        reason = f"unavailable() raised {type(exc).__name__}: {exc}"
    return ("skipped", reason) if reason else None


# --- measuring (runs in the worker) ------------------------------------------------------------


def _accelerator(device: torch.device):
    return None if device.type == "cpu" else getattr(torch, device.type)


def _rss_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class MemoryProbe:
    """Peak memory of a region: see MEMORY_METHODS for what each device reports."""

    def __init__(self, device: torch.device, *, inline: bool):
        self.device = device
        self.inline = inline
        self.method = None
        self.base = 0

    def start(self) -> None:
        accel = _accelerator(self.device)
        if accel is not None:
            accel.synchronize()
            accel.reset_peak_memory_stats()
            self.base = accel.memory_allocated()
            self.method = "accelerator"
            return
        rss = _rss_kib("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
                handle.write("5")
            self.method, self.base = "cpu", rss * 1024
        except (OSError, TypeError):
            import resource

            self.method, self.base = "cpu-fallback", (rss or 0) * 1024
            self._resource = resource

    def stop(self) -> int:
        accel = _accelerator(self.device)
        if accel is not None:
            accel.synchronize()
            peak = accel.max_memory_allocated()
        elif self.method == "cpu":
            peak = _rss_kib("VmHWM") * 1024
        else:
            peak = self._resource.getrusage(self._resource.RUSAGE_SELF).ru_maxrss * 1024
        return max(0, peak - self.base)


def measure(task: dict) -> dict:
    """Run one (case, impl, device): warm-up, timed repeats, peak memory. Returns the figures."""
    device = torch.device(task["device"])
    case = bench_cases.get_case(task["case"], task["shape_set"])
    if task["locator"][0] == "oracle":
        fn = oracle_function(case)
    else:
        fn = getattr(_locate(task["locator"]), case.op)
    torch.manual_seed(0)
    call = case.bind(fn, device, getattr(torch, task["dtype"]))
    accel = _accelerator(device)

    def timed() -> float:
        start = time.perf_counter()
        out = call()
        if accel is not None:
            accel.synchronize()
        elapsed = time.perf_counter() - start
        del out
        return elapsed

    warm = [timed() for _ in range(task["warmup"])]
    repeats = task["repeats"]
    if warm and warm[-1] > 0:  # the last warm-up call: the first may include a compile
        repeats = max(task["min_repeats"], min(repeats, int(task["budget_s"] / warm[-1])))
    probe = MemoryProbe(device, inline=task["inline"])
    probe.start()
    times = [timed() for _ in range(repeats)]
    peak = probe.stop()
    return {
        "status": "ok",
        "median_s": statistics.median(times),
        "min_s": min(times),
        "times_s": times,
        "warmup_s": warm,
        "repeats": repeats,
        "peak_bytes": peak,
        "memory_method": "inline" if task["inline"] else probe.method,
    }


def _worker(task: dict, conn) -> None:
    try:
        result = measure(task)
    except BaseException as exc:  # reported as the row's error, never a crash of the bench
        result = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:2000]}
    conn.send(result)
    conn.close()


_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


@contextlib.contextmanager
def _malloc_env():
    """Children (and the fork server) start with glibc's mmap threshold pinned: freed tensors leave RSS."""
    saved = {k: os.environ.get(k) for k in _MALLOC_ENV}
    os.environ.update(_MALLOC_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _context():
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        # The server imports torch once; each worker forks from it (no torch re-import per
        # case) and has never run a torch op, so its thread pools start fresh. (conformance.bench
        # is not preloaded: it may be __main__, which multiprocessing re-runs as __mp_main__.)
        ctx.set_forkserver_preload(["torch", "backends", "benchmarks.cases"])
        return ctx
    return multiprocessing.get_context("spawn")


def run_isolated(task: dict, *, timeout_s: float) -> dict:
    """``measure(task)`` in a fresh worker process; a timeout or a killed worker is an error row."""
    ctx = _context()
    receive, send = ctx.Pipe(duplex=False)
    with _malloc_env():
        process = ctx.Process(target=_worker, args=(task, send), daemon=True)
        process.start()
    send.close()
    result = None
    if receive.poll(timeout_s):
        try:
            result = receive.recv()
        except EOFError:
            result = None
    process.join(5 if result is not None else 0.1)
    if process.is_alive():
        process.kill()
        process.join()
        if result is None:
            return {"status": "error", "reason": f"timed out after {timeout_s:g} s (--timeout)"}
    if result is None:
        code = process.exitcode
        hint = " (killed: out of memory?)" if code in (-9, 137) else ""
        return {"status": "error", "reason": f"worker process died with exit code {code}{hint}"}
    return result


# --- the run -----------------------------------------------------------------------------------


def _ratio(value, base):
    return None if value is None or not base else value / base


def add_ratios(results: list[dict]) -> None:
    """Fill ratio_to_native and ratio_to_peer from rows of the same case and device."""
    medians = {(r["case"], r["device"], r["impl"]): r.get("median_s") for r in results if r["status"] == "ok"}
    for row in results:
        native = medians.get((row["case"], row["device"], BASELINE))
        peer = medians.get((row["case"], row["device"], row["peer"])) if row["peer"] else None
        row["ratio_to_native"] = _ratio(row.get("median_s"), native)
        row["ratio_to_peer"] = _ratio(row.get("median_s"), peer)


def evaluate_targets(results: list[dict], selected: list[bench_cases.Case], shape_set: str) -> list[dict]:
    """Issue 7 item 1: the oracle's measured time and peak against its target, per device."""
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


def select_cases(shape_set: str, patterns: Sequence[str]) -> list[bench_cases.Case]:
    """Cases whose id contains a pattern (all without patterns; at --quick, the first case of each op)."""
    chosen = bench_cases.cases(shape_set)
    if shape_set == "quick" and not patterns:
        chosen = list({c.op: c for c in reversed(chosen)}.values())[::-1]
    if patterns:
        chosen = [c for c in chosen if any(p in c.id for p in patterns)]
        if not chosen:
            raise BenchUsageError(
                f"--case: no case id contains any of {list(patterns)}; "
                f"known: {[c.id for c in bench_cases.CASES]}"
            )
    return chosen


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
    if shape_set not in PROFILES:
        raise BenchUsageError(f"shape_set must be one of {tuple(PROFILES)}, got {shape_set!r}")
    if dtype not in DTYPES:
        raise BenchUsageError(f"--dtype must be one of {DTYPES}, got {dtype!r}")
    if isolation is None:
        isolation = "inline" if shape_set == "quick" else "process"
    if isolation not in ("process", "inline"):
        raise BenchUsageError(f"--isolation must be 'process' or 'inline', got {isolation!r}")
    unknown = [d for d in devices if d not in KNOWN_DEVICE_TYPES]
    if unknown:
        raise BenchUsageError(f"--device: unknown device(s) {unknown}; expected some of {KNOWN_DEVICE_TYPES}")
    profile = dict(PROFILES[shape_set])
    for key, value in (
        ("warmup", warmup),
        ("repeats", repeats),
        ("budget_s", budget_s),
        ("timeout_s", timeout_s),
    ):
        if value is not None:
            profile[key] = value
    profile["min_repeats"] = min(profile["min_repeats"], profile["repeats"])
    selected = select_cases(shape_set, case_patterns)
    impls, broken = select_impls(backend_names, backend_modules)
    device_names = list(dict.fromkeys(devices or KNOWN_DEVICE_TYPES))
    started = time.perf_counter()
    results: list[dict] = []
    for device_name in device_names:
        absent = absent_reason(device_name)
        if absent and not devices:
            continue  # not present and not asked for: silently left out (as in the test suite)
        device = None if absent else torch.device(device_name)
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
                row = {**base, "impl": impl.name, "kind": impl.kind}
                skip = (
                    ("skipped", f"device {device_name}: {absent}")
                    if absent
                    else skip_reason(case, impl, device)
                )
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
                        **{k: profile[k] for k in ("warmup", "repeats", "min_repeats", "budget_s")},
                    }
                    if isolation == "inline":
                        try:
                            row.update(measure(task))
                        except Exception as exc:
                            row.update(status="error", reason=f"{type(exc).__name__}: {exc}"[:2000])
                    else:
                        row.update(run_isolated(task, timeout_s=profile["timeout_s"]))
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
            if case.peer and case.peer not in known and (not backend_names or case.peer in backend_names):
                reason = f"peer {case.peer!r} is not a registered backend (its code is not on this branch)"
                results.append(
                    {**base, "impl": case.peer, "kind": "peer", "status": "skipped", "reason": reason}
                )
    add_ratios(results)
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
        "settings": profile,
        "devices": device_names,
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
    }


# --- output ------------------------------------------------------------------------------------


def _bytes(value) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)


def _seconds(value) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.3f} ms" if value < 1 else f"{value:.2f} s"


def _times(value) -> str:
    return "-" if value is None else f"{value:.3g}x"


def format_table(document: dict) -> str:
    """The terminal table: one row per (case, device, impl) that ran or was skipped."""
    rows = [TABLE_COLUMNS]
    hidden = 0
    for r in document["results"]:
        if r["status"] == "not-implemented":
            hidden += 1
            continue
        reason = " ".join(str(r.get("reason", "")).split())  # one line, whatever the exception said
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {reason}"
        if len(status) > 90:
            status = status[:87] + "..."
        time_text = _seconds(r.get("median_s")) if r.get("time_is_absolute") else "(cpu: ratios)"
        if r["status"] != "ok":
            time_text = "-"
        rows.append(
            (
                r["case"],
                r["device"],
                r["impl"],
                time_text,
                _times(r.get("ratio_to_native")),
                _times(r.get("ratio_to_peer")),
                _bytes(r.get("peak_bytes")),
                status,
            )
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(TABLE_COLUMNS))]
    lines = [
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [
        f"x native / x peer: median time over {BASELINE!r} / over the case's peer, same device and run "
        "(>1 = slower). Peers: "
        + (", ".join(sorted({f"{c['op']}: {c['peer']}" for c in document["cases"] if c["peer"]})) or "none"),
        "peak mem: "
        + "; ".join(
            f"{k}: {v}"
            for k, v in document["memory_methods"].items()
            if any(r.get("memory_method") == k for r in document["results"])
        ),
    ]
    if hidden:
        notes.append(
            f"{hidden} (case, backend) pairs where the backend lacks the op are left out (see JSON)."
        )
    return "\n".join(lines + [""] + notes)


def format_targets(document: dict) -> str:
    if not document["targets"]:
        return ""
    lines = ["Oracle targets (issue 7 item 1): measured vs target"]
    for t in document["targets"]:
        limit = f"<= {t['target_s']:g} s" + (
            f", <= {_bytes(t['target_peak_bytes'])}" if t["target_peak_bytes"] else ""
        )
        measured = f"{_seconds(t['measured_s'])}, peak {_bytes(t['measured_peak_bytes'])}"
        verdict = t["verdict"] + (f" ({t['reason']})" if t.get("reason") else "")
        lines.append(f"  {t['case']} [{t['device']}]: measured {measured}; target {limit}: {verdict}")
    return "\n".join(lines)


def write_chart(document: dict, path: str) -> str | None:
    """A PNG of the ratios (log scale), one panel per ratio kind; returns why not, when it cannot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib not installed (the 'bench' extra): {exc}"
    ok = [r for r in document["results"] if r["status"] == "ok"]
    panels = [
        ("ratio_to_native", f"time / {BASELINE} (same case, device, run)"),
        ("ratio_to_peer", "time / the case's peer"),
    ]
    height = max(3.0, 0.28 * max(1, len(ok)) + 1.5)
    fig, axes = plt.subplots(1, 2, figsize=(15, height), sharey=True)
    labels = [f"{r['case']} [{r['device']}] {r['impl']}" for r in ok]
    positions = list(range(len(ok)))
    colors = {"oracle": "tab:gray", "backend": "tab:blue", "peer": "tab:orange"}
    for ax, (key, title) in zip(axes, panels, strict=True):
        values = [r.get(key) for r in ok]
        bars = [v if v else math.nan for v in values]
        ax.barh(positions, bars, color=[colors.get(r["kind"], "tab:blue") for r in ok])
        ax.axvline(1.0, color="black", linewidth=0.8)
        if any(v for v in values):
            ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[0].set_yticks(positions, labels, fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle(
        f"opconform bench ({document['shape_set']} shapes, {document['dtype']}; gray oracle, "
        "blue backend, orange peer; missing bar = no baseline)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def format_case_list(shape_set: str) -> str:
    lines = []
    for c in bench_cases.cases(shape_set):
        target = f"  [target <= {c.target.seconds:g} s]" if c.target else ""
        lines.append(
            f"{c.id}\n    {c.source}\n    {shape_set}: {json.dumps(c.params)}"
            f"{'  peer: ' + c.peer if c.peer else ''}{target}"
        )
    return "\n".join(lines)


# --- CLI ---------------------------------------------------------------------------------------


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0 or (kind is float and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    return parse


def build_parser(prog: str = "opconform bench") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: the first case of each op at tiny shapes, few repeats, inline",
    )
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="SUBSTR",
        help="run only cases whose id contains SUBSTR (repeatable; see --list)",
    )
    parser.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="backends/peers to run besides the oracle (repeatable; default: all; 'oracle' alone: only it)",
    )
    parser.add_argument(
        "--backend-module",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="also load external backends from MODULE.ATTR",
    )
    parser.add_argument(
        "--device",
        action="append",
        default=[],
        choices=KNOWN_DEVICE_TYPES,
        help="device type (repeatable; default: every present one)",
    )
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES, help="input dtype (default bfloat16)")
    parser.add_argument("--warmup", type=_positive(int), help="warm-up calls per implementation")
    parser.add_argument("--repeats", type=_positive(int), help="timed calls per implementation (at most)")
    parser.add_argument(
        "--budget",
        type=_positive(float),
        metavar="SECONDS",
        help="timed seconds per implementation; slow calls get fewer repeats (min 3 full, 2 quick)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive(float),
        metavar="SECONDS",
        help="kill a worker after this long (an error row)",
    )
    parser.add_argument(
        "--isolation",
        choices=("process", "inline"),
        help="process: a fresh worker per measurement (clean peak memory; the default); "
        "inline: in this process (compiles are shared, memory indicative only; "
        "the default with --quick)",
    )
    parser.add_argument("--json", default="opconform-bench.json", metavar="PATH", help="JSON output path")
    parser.add_argument("--chart", default="opconform-bench.png", metavar="PATH", help="PNG chart path")
    parser.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")
    parser.add_argument("--list", action="store_true", help="list the cases and their shapes, then exit")
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "opconform bench") -> int:
    """Run the bench; 0 when every measurement ran or was skipped with a reason, 1 on an error row,
    2 on bad options."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    shape_set = "quick" if args.quick else "full"
    if args.list:
        print(format_case_list(shape_set))
        return 0
    for option, path in (("--json", args.json), ("--chart", None if args.no_chart else args.chart)):
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            parser.error(f"{option}: directory of {path!r} does not exist")
    try:
        document = run_bench(
            shape_set=shape_set,
            case_patterns=args.case,
            backend_names=args.backend,
            backend_modules=args.backend_module,
            devices=args.device,
            dtype=args.dtype,
            warmup=args.warmup,
            repeats=args.repeats,
            budget_s=args.budget,
            timeout_s=args.timeout,
            isolation=args.isolation,
            progress=lambda message: print(message, file=sys.stderr, flush=True),
        )
    except BenchUsageError as exc:
        parser.error(str(exc))
    print(format_table(document))
    targets = format_targets(document)
    if targets:
        print("\n" + targets)
    document["chart"] = None
    if not args.no_chart:
        why_not = write_chart(document, args.chart)
        if why_not:
            document["chart_skipped"] = why_not
            print(f"\nchart skipped: {why_not}")
        else:
            document["chart"] = args.chart
            print(f"\nchart: {args.chart}")
    with open(args.json, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    print(f"json: {args.json}   ({document['duration_s']:.1f} s)")
    return 1 if any(r["status"] == "error" for r in document["results"]) else 0


def _command():
    from conformance.cli import Command

    return Command("time every op on every backend and device against the oracle and its peers",
                   add_arguments=lambda parser: None, handler=lambda args: main([]), main=main)  # fmt: skip


BENCH = _command()

if __name__ == "__main__":
    sys.exit(main(prog="python -m conformance.bench"))

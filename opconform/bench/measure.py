"""The bench's measurement: one (case, implementation, device) timed in a worker process.

``measure(task)`` warms up, times repeated calls (median reported) and takes the peak memory of
the timed calls (see ``MEMORY_METHODS``); ``run_isolated`` runs it in a fresh spawned process.
A task is a picklable dict, so an implementation is found again from its ``Impl.locator``.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import statistics
import time
import warnings
from dataclasses import dataclass

import torch

import backends as registry
from benchmarks import cases as bench_cases
from conformance.signatures import start_folder_on_path

ORACLE = "oracle"

MEMORY_METHODS = {
    "cpu": "peak RSS of the timed calls in a fresh worker process: Linux VmHWM after resetting it "
    "(/proc/self/clear_refs = 5) once inputs exist and warm-up ran, minus VmRSS at the reset; "
    "glibc's mmap threshold is pinned to 64 KiB so freed tensors leave RSS",
    "cpu-fallback": "ru_maxrss minus RSS after input creation (VmHWM could not be reset; an upper bound)",
    "accelerator": "torch.<device>.max_memory_allocated() after reset_peak_memory_stats(), minus "
    "memory_allocated() once inputs exist (tensor memory only, not the caching allocator's reserve)",
    "inline": "as for the device, but in the bench process itself (--isolation inline): indicative only",
}


@dataclass(frozen=True)
class Impl:
    """Something that runs a case: the oracle, a backend or a bench peer."""

    name: str
    kind: str  # "oracle", "backend", "peer"
    locator: tuple  # how a worker process finds it again (picklable)
    obj: object = None  # the backend object (parent side only)
    comparator: bool = False  # run only for the cases whose peer it is (not selected with --backend)


def peer_objects() -> list:
    from benchmarks.peers import PEERS

    return list(PEERS)


def _locate(locator: tuple):
    kind = locator[0]
    if kind == "builtin":
        return registry.import_attr(locator[1])
    if kind == "entry-point":
        return next(b for b in registry.entry_point_backends() if b.name == locator[1])
    if kind == "module":
        start_folder_on_path(locator[3] if len(locator) > 3 else None)  # as `python -m` finds it
        return next(b for b in registry.load_backend_module(locator[1]) if b.name == locator[2])
    if kind == "peer":
        return next(p for p in peer_objects() if p.name == locator[1])
    raise ValueError(f"unknown implementation locator {locator!r}")


def warning_lines(caught) -> list[str]:
    """Caught warnings as distinct one-line texts, ``Category: first line of the message``."""
    lines = []
    for item in caught:
        text = str(item.message).strip().splitlines() or [""]
        lines.append(f"{item.category.__name__}: {text[0]}")
    return list(dict.fromkeys(lines))


def oracle_function(case: bench_cases.Case):
    """The oracle callable for a case; raises ImportError/AttributeError when its code is absent."""
    module = importlib.import_module(case.oracle_module)
    return getattr(module, case.oracle_attr or case.op)


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
    """Run one (case, impl, device): warm-up, timed repeats, peak memory. Returns the figures and
    the warnings raised meanwhile (``warnings``: one line each, printed after the table)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _measure(task)
    result["warnings"] = warning_lines(caught)
    return result


def _measure(task: dict) -> dict:
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
        # case) and has never run a torch op, so its thread pools start fresh. (The bench modules
        # are not preloaded: one may be __main__, which multiprocessing re-runs as __mp_main__.)
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

"""The cost of capture to the model (issue 23's done-when; docs/capture.md, Cost): a "model" of
1,000 calls of a 4096-wide activation (new_gelu on [rows, 4096] float32) timed on CPU without
capture and with every call recorded, and the byte budget checked. Prints figures; asserts
nothing about time (a shared CI machine's timings are noise). Each round times the plain forward
and then the captured one (a fresh capture: its construction, the forward, its ``close()``), so a
ratio pairs two forwards measured under the same load; the medians and the best round are shown.
The floor is the forward plus the two host copies per call into warm buffers, without capture.
The captured forward's wall time beyond the model thread's CPU is split into waiting for a write
to free a buffer and waiting, runnable, for a core (Linux schedstat: the writer's CPU, shown
too, and other processes take the cores); the time a virtual machine's host took from its cores
meanwhile (Linux /proc/stat steal, all cores together) is shown for both forwards: it is neither
the model's CPU nor a wait the guest sees.
``python scripts/docs_figures.py capture-overhead`` writes docs/generated/capture-overhead.md.

    python -m benchmarks.capture_overhead [--rows 8] [--calls 1000] [--rounds 5] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from conformance.options import positive


class Activations(torch.nn.Module):
    def __init__(self, calls: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.GELU(approximate="tanh") for _ in range(calls))

    def forward(self, x):
        return [layer(x) for layer in self.layers]


def _timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def _both(function) -> tuple[float, float, object]:
    """Wall seconds and the calling thread's CPU seconds (the model's thread: not the writer's, and
    not the time other processes of a shared machine take from it)."""
    cpu = time.thread_time()
    wall, result = _timed(function)
    return wall, time.thread_time() - cpu, result


def _queued() -> float:
    """Seconds the calling thread has waited runnable for a core (Linux schedstat; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _stolen(path: str = "/proc/stat") -> float:
    """Seconds the host has taken from all of this machine's cores (Linux /proc/stat steal, the
    eighth number of its first line, in clock ticks; 0 elsewhere and on bare metal)."""
    try:
        with open(path) as stat:
            return int(stat.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _plain(model, x) -> tuple[float, float, float]:
    """The forward's wall and CPU seconds and what the host took meanwhile."""
    stolen = _stolen()
    wall, cpu, _ = _both(lambda: model(x))
    return wall, cpu, _stolen() - stolen


def _floor(model, x) -> tuple[float, float]:
    """The forward with each call's two host copies (input before, output after) into warm buffers."""
    buffers = torch.empty(len(model.layers), 2, x.numel())
    buffers.zero_()

    def forward():
        for i, layer in enumerate(model.layers):
            buffers[i, 0].copy_(x.view(-1))
            buffers[i, 1].copy_(layer(x).view(-1))

    return _both(forward)[:2]


def _captured(model, x, budget, prefault, calls, shard_bytes):
    from opconform.capture import Capture, read_index

    options = {} if shard_bytes is None else {"shard_bytes": shard_bytes}
    with tempfile.TemporaryDirectory() as folder:
        built, capture = _timed(
            lambda: Capture(folder, max_calls_per_op=calls, byte_budget=budget, prefault=prefault, **options)
        )
        for i, layer in enumerate(model.layers):
            capture.attach(layer, "new_gelu", lambda m, a, k: {"x": a[0]}, name=f"layers.{i}")
        queued, process, stolen = _queued(), time.process_time(), _stolen()
        forward, cpu, out = _both(lambda: model(x))
        queued, others = _queued() - queued, time.process_time() - process - cpu
        stolen = _stolen() - stolen
        waited = capture._staging.waited
        closing, _ = _timed(capture.close)
        writes = [write.result() for write in capture._staging.writes]  # each shard's (wall, CPU) seconds
        assert all(torch.equal(o, F.gelu(x, approximate="tanh")) for o in out[:3])
        index, entries = read_index(folder)
        on_disk = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))
    return {"built": built, "forward": forward, "cpu": cpu, "close": closing, "waited": waited,
            "queued": queued, "others": others, "stolen": stolen, "recorded": len(entries),
            "bytes": index["bytes"], "on_disk": on_disk, "writes": writes,
            "shard": capture._staging.capacity}  # fmt: skip


def _ms(values) -> str:
    return f"median {statistics.median(values) * 1e3:.1f} ms, best {min(values) * 1e3:.1f} ms"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=positive(int), default=8)
    parser.add_argument("--calls", type=positive(int), default=1000)
    parser.add_argument("--width", type=positive(int), default=4096)
    parser.add_argument("--rounds", type=positive(int), default=5)
    parser.add_argument("--no-prefault", action="store_true", help="Capture(prefault=False)")
    parser.add_argument(
        "--threads", type=positive(int), default=None, help="torch.set_num_threads (default: torch's)"
    )
    parser.add_argument(
        "--shard-bytes", type=positive(int), default=None, help="Capture(shard_bytes=...); default: its own"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, x = Activations(args.calls), torch.randn(args.rows, args.width)
    budget = 2 * x.numel() * x.element_size() * args.calls
    plain, floor, runs = [], [], []
    with torch.no_grad():
        model(x)  # warm-up
        for _ in range(args.rounds):
            plain.append(_plain(model, x))
            floor.append(_floor(model, x))
            runs.append(_captured(model, x, budget, not args.no_prefault, args.calls, args.shard_bytes))
    last = runs[-1]
    wall, cpu = [p[0] for p in plain], [p[1] for p in plain]
    print(
        f"{args.calls} calls of new_gelu on [{args.rows}, {args.width}] float32, CPU: "
        f"{os.cpu_count()} cores, "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads; {args.rounds} rounds, "
        f"prefault={not args.no_prefault}, shard_bytes={args.shard_bytes or 'default'}; wall time, then the "
        "model thread's CPU time"
    )
    print(f"  forward without capture:       {_ms(wall)}; CPU {_ms(cpu)}")
    print(f"  the host took meanwhile:       {_ms([p[2] for p in plain])} (steal, all cores)")
    print(f"  forward + two host copies:     {_ms([f[0] for f in floor])}; CPU {_ms([f[1] for f in floor])}")
    captured = [r["forward"] for r in runs]
    print(f"  forward with capture:          {_ms(captured)}; CPU {_ms([r['cpu'] for r in runs])}")
    print(f"  of which waiting for writes:   {_ms([r['waited'] for r in runs])}")
    print(f"  of which waiting for a core:   {_ms([r['queued'] for r in runs])}")
    print(f"  the host took meanwhile:       {_ms([r['stolen'] for r in runs])} (steal, all cores)")
    print(f"  other threads' CPU meanwhile:  {_ms([r['others'] for r in runs])} (writer, torch's workers)")
    writes = [w for r in runs for w in r["writes"]]
    pace = sum(r["bytes"] for r in runs) / sum(w[0] for w in writes) / 1e9
    made = sum(r["bytes"] for r in runs) / sum(r["cpu"] for r in runs) / 1e9
    print(
        f"  the writer, per shard of {last['shard'] >> 20} MiB: {_ms([w[0] for w in writes])}; CPU "
        f"{_ms([w[1] for w in writes])}; {pace:.2f} GB/s written; the model's thread staged {made:.2f} GB/s "
        "of its CPU time"
    )
    print(f"  Capture() construction:        {_ms([r['built'] for r in runs])}")
    print(f"  close() (last writes, index):  {_ms([r['close'] for r in runs])}")
    closed = [r["forward"] + r["close"] for r in runs]
    for label, values, base in (
        ("capture / without, wall", captured, wall),
        ("capture + close() / without", closed, wall),
        ("capture / without, CPU", [r["cpu"] for r in runs], cpu),
        ("floor / without, wall", [f[0] for f in floor], wall),
        ("floor / without, CPU", [f[1] for f in floor], cpu),
    ):  # a round's ratio pairs two forwards under one load; the bests' ratio, the quietest moments
        ratios = [v / b for v, b in zip(values, base, strict=True)]
        print(
            f"  {label + ':':30} median of rounds {statistics.median(ratios):.2f}x, "
            f"bests' ratio {min(values) / min(base):.2f}x"
        )
    print(
        f"  {last['recorded']} calls recorded; tensor bytes {last['bytes']} <= budget {budget}: "
        f"{last['bytes'] <= budget}; files {last['on_disk']} bytes"
    )


if __name__ == "__main__":
    main()

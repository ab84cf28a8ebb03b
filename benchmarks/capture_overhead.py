"""The cost of capture to the model (issue 23's done-when; docs/capture.md, Cost): a "model" of
1,000 calls of a 4096-wide activation (new_gelu on [rows, 4096] float32) timed on CPU without
capture and with every call recorded, and the byte budget checked. Prints figures; asserts
nothing about time (a shared CI machine's timings are noise).

    PYTHONPATH=. python benchmarks/capture_overhead.py [--rows 8] [--calls 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F


class Activations(torch.nn.Module):
    def __init__(self, calls: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.GELU(approximate="tanh") for _ in range(calls))

    def forward(self, x):
        return [layer(x) for layer in self.layers]


def _time(model, x, repeats=3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        model(x)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> None:
    from opconform.capture import Capture, read_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--width", type=int, default=4096)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, x = Activations(args.calls), torch.randn(args.rows, args.width)
    with torch.no_grad():
        plain = _time(model, x)
        per_call = 2 * x.numel() * x.element_size()
        budget = per_call * args.calls
        with tempfile.TemporaryDirectory() as folder:
            with Capture(folder, max_calls_per_op=args.calls, byte_budget=budget) as capture:
                for i, layer in enumerate(model.layers):
                    capture.attach(layer, "new_gelu", lambda m, a, k: {"x": a[0]}, name=f"layers.{i}")
                start = time.perf_counter()
                out = model(x)
                captured = time.perf_counter() - start
            assert all(torch.equal(o, F.gelu(x, approximate="tanh")) for o in out[:3])
            index, entries = read_index(folder)
            on_disk = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))
    print(
        f"{args.calls} calls of new_gelu on [{args.rows}, {args.width}] float32, CPU, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"  forward without capture: {plain * 1e3:.1f} ms (best of 3)")
    print(
        f"  forward with capture:    {captured * 1e3:.1f} ms ({captured / plain:.2f}x), "
        f"{len(entries)} calls recorded"
    )
    print(
        f"  tensor bytes {index['bytes']} <= budget {budget}: {index['bytes'] <= budget}; "
        f"files {on_disk} bytes"
    )


if __name__ == "__main__":
    main()

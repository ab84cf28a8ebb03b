"""``opconform replay DIR``: judge every call of a capture folder against the oracles and write
the results document (exit 1 on a failure or an unreadable call, 2 on a refused folder)."""

from __future__ import annotations

import argparse
import sys

from opconform.commands import help_for, usage_error, writable_dir

HELP = help_for("replay")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("capture", metavar="DIR", help="a folder written by opconform.capture.Capture")
    parser.add_argument(
        "--backend", default=None, metavar="NAME",
        help="rerun this backend (built-in name or MODULE[:ATTR]) on the recorded inputs",
    )  # fmt: skip
    parser.add_argument(
        "--device", default="cpu", metavar="DEVICE", help="the device for --backend (default cpu)"
    )
    parser.add_argument("--out", default=None, metavar="DIR", help="write report.json/.md/.html there")


def _backend(name: str):
    from backends import BUILTIN, BackendError, import_attr, load_backend_module

    try:
        return import_attr(BUILTIN[name]) if name in BUILTIN else load_backend_module(name)[0]
    except (BackendError, IndexError) as exc:
        raise ValueError(
            f"--backend {name}: {exc or 'no backend there'}; built-in: {sorted(BUILTIN)}"
        ) from None


def run(args: argparse.Namespace) -> int:
    from opconform import render, report
    from opconform.capture.judge import replay
    from opconform.capture.store import CaptureError

    why = writable_dir(args.out) if args.out else None
    if why:
        return usage_error("replay", f"--out {args.out}: cannot write there: {why}")
    try:
        backend = _backend(args.backend) if args.backend else None
        if backend is not None:
            import torch

            absent = backend.unavailable(torch.device(args.device))
            if absent:
                return usage_error("replay", f"--backend {args.backend} on --device {args.device}: {absent}")
        document, problems = replay(args.capture, backend=backend, device=args.device)
    except (CaptureError, ValueError, RuntimeError) as exc:
        return usage_error("replay", exc)
    data = document.to_dict()
    print(render.text(data))
    for problem in problems:
        print(f"opconform replay: {problem}", file=sys.stderr)
    if args.out:
        written = render.write_outputs(data, args.out)
        print("\nwrote " + ", ".join(map(str, written)))
    return 0 if report.conforms(data) and not problems else 1

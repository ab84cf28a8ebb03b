"""``opconform replay DIR``: judge every call of a capture folder against the oracles and write
the results document (exit 1 on a failure or an unreadable call, 2 on a refused folder or a bad
argument, 3 when ``--device`` is absent). ``--case ID`` (repeatable) replays exactly those calls:
each failure's rerun line is that command. ``--from msprobe DUMP_DIR`` judges an msprobe dump
instead (opconform.capture.msprobe_replay; spec/ascend.md, MSPROBE-DUMP, MSPROBE-MAP)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opconform.commands import EXIT_DEVICE_ABSENT, help_for, usage_error, writable_dir

HELP = help_for("replay")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "capture",
        metavar="DIR",
        help="a folder written by opconform.capture.Capture (or msprobe's dump_path)",
    )
    parser.add_argument(
        "--from", dest="source_format", choices=("capture", "msprobe"), default="capture",
        help="what DIR holds: opconform's capture (default) or an msprobe dump (task tensor, level L1/mix)",
    )  # fmt: skip
    parser.add_argument(
        "--backend", default=None, metavar="NAME",
        help="rerun this backend (built-in name or MODULE[:ATTR]) on the recorded inputs",
    )  # fmt: skip
    parser.add_argument(
        "--device", default=None, metavar="DEVICE",
        help="the device for --backend: cpu, cuda or npu, optionally :INDEX (default cpu)",
    )  # fmt: skip
    parser.add_argument(
        "--case", action="append", default=None, metavar="ID",
        help="replay only this call (its case id, replay::LAYER::callN::OP; repeatable)",
    )  # fmt: skip
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
    from opconform.capture.judge import DeviceAbsent, device_problem, replay, selected
    from opconform.capture.store import CaptureError, read_index

    if args.device is not None and args.backend is None:
        return usage_error(
            "replay",
            f"--device {args.device}: only used with --backend (without it the recorded outputs are judged)",
        )
    why = writable_dir(args.out) if args.out else None
    if why:
        return usage_error("replay", f"--out {args.out}: cannot write there: {why}")
    if args.source_format == "msprobe":
        return _run_msprobe(args)
    device = args.device or "cpu"
    try:
        selected(read_index(args.capture)[1], args.case, args.capture)  # the folder and --case, first
        refused = device_problem(device) if args.backend else None
        if isinstance(refused, DeviceAbsent):
            print(f"opconform replay: {refused}", file=sys.stderr)
            return EXIT_DEVICE_ABSENT
        if refused is not None:
            raise refused
        backend = _backend(args.backend) if args.backend else None
        rerun = ["opconform", "replay", args.capture]
        rerun += ["--backend", args.backend, "--device", device] if backend is not None else []
        document, problems = replay(
            args.capture, backend=backend, device=device, cases=args.case, rerun=rerun
        )
    except (CaptureError, ValueError, RuntimeError) as exc:
        hint = (
            " (an msprobe dump? add --from msprobe)"
            if next(Path(args.capture).rglob("dump.json"), None)
            else ""
        )
        return usage_error("replay", f"{exc}{hint}")
    data = document.to_dict()
    print(render.text(data))
    for problem in problems:
        print(f"opconform replay: {problem}", file=sys.stderr)
    if args.out:
        written = render.write_outputs(data, args.out)
        print("\nwrote " + ", ".join(map(str, written)))
    return 0 if report.conforms(data) and not problems else 1


def _run_msprobe(args: argparse.Namespace) -> int:
    from opconform import render, report
    from opconform.capture.msprobe_replay import replay_msprobe
    from opconform.capture.store import CaptureError

    if args.backend is not None or args.device is not None:
        flag = "--backend" if args.backend is not None else "--device"
        return usage_error("replay", f"{flag}: not with --from msprobe (the dump's own outputs are judged)")
    try:
        document, problems, _ = replay_msprobe(args.capture, cases=args.case)
    except (CaptureError, ValueError) as exc:
        return usage_error("replay", exc)
    data = document.to_dict()
    print(render.text(data))  # with what the dump holds and was not judged (msprobe.not_judged)
    for problem in problems:
        print(f"opconform replay: {problem}", file=sys.stderr)
    if args.out:
        written = render.write_outputs(data, args.out)
        print("\nwrote " + ", ".join(map(str, written)))
    return 0 if report.conforms(data) and not problems else 1

"""The ``opconform`` console script: ``run``, ``merge`` and ``diff``.

Subcommands are listed in ``COMMANDS`` as ``module:attribute`` strings naming a ``Command``
and imported only when chosen, so later issues add ``mutants`` or ``bench`` with one line and
their own module.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROFILES = ("dev", "ci", "thorough")


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    # A command that parses the rest of the command line itself (bench): main(argv) -> exit status.
    main: Callable[[list[str]], int] | None = None


def _write_outputs(document: dict, out: Path) -> list[Path]:
    import json

    from conformance import render

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in (
        ("report.json", json.dumps(document, indent=1)),
        ("report.md", render.markdown(document)),
        ("report.html", render.html_page(document)),
    ):
        (out / name).write_text(content, encoding="utf-8")
        written.append(out / name)
    return written


def _load_reports(paths) -> list[dict]:
    from conformance import report

    return [report.load(p) for p in paths]


# --- run -----------------------------------------------------------------------------------


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", action="append", default=[], metavar="NAME", help="backend (repeatable)")
    parser.add_argument(
        "--device", action="append", default=[], metavar="NAME", help="device type (repeatable)"
    )
    parser.add_argument(
        "--backend-module", action="append", default=[], metavar="MODULE[:ATTR]", help="external backends"
    )
    parser.add_argument("--expectations", action="append", default=[], metavar="PATH",
                        help="expectations manifest or directory of them (repeatable)")  # fmt: skip
    parser.add_argument("--profile", choices=PROFILES, default=None, help="Hypothesis profile")
    parser.add_argument("-n", dest="workers", default=None, metavar="N", help="xdist workers: N or auto")
    parser.add_argument("--out", default="opconform-report", metavar="DIR",
                        help="where report.json/.md/.html go (default: %(default)s)")  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed on to pytest")


def plugin_registered() -> bool:
    """Whether an installed opconform registers the plugin through the ``pytest11`` entry point."""
    from importlib import metadata

    return any(ep.value == "conformance.plugin" for ep in metadata.entry_points(group="pytest11"))


def pytest_command(args: argparse.Namespace, report_json: Path) -> list[str]:
    """The pytest command line ``opconform run`` executes (the installed suite, via --pyargs).

    From a checkout that is not pip-installed (``python -m conformance.cli`` with the checkout on
    PYTHONPATH, as on a CUDA host with its own torch) no entry point loads the plugin, and the
    checkout's conftest.py is not loaded when the run starts outside the checkout: load it by name.
    """
    command = [sys.executable, "-m", "pytest", "--pyargs", "conformance", "-p", "no:cacheprovider",
               f"--opconform-json={report_json}"]  # fmt: skip
    if not plugin_registered():
        command += ["-p", "conformance.plugin"]
    command += [f"--backend={b}" for b in args.backend]
    command += [f"--device={d}" for d in args.device]
    command += [f"--backend-module={m}" for m in args.backend_module]
    command += [f"--opconform-expectations={os.path.abspath(e)}" for e in args.expectations]
    if args.profile:
        command.append(f"--hypothesis-profile={args.profile}")
    if args.workers is not None:
        command += ["-n", str(args.workers)]
    else:
        command += ["-p", "no:xdist"]
    return command + list(args.pytest_args)


def _run(args: argparse.Namespace) -> int:
    from conformance import render, report

    if args.workers is not None and importlib.util.find_spec("xdist") is None:
        print("opconform run: -n needs pytest-xdist (pip install pytest-xdist)", file=sys.stderr)
        return 2
    for path in args.expectations:
        if not Path(path).exists():
            print(f"opconform run: --expectations {path}: no such file or directory", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report_json = (out / "report.json").resolve()
    report_json.unlink(missing_ok=True)
    command = pytest_command(args, report_json)
    print("opconform run:", " ".join(command), flush=True)
    returncode = subprocess.call(command)  # pytest shows the progress
    if not report_json.exists():
        print(f"opconform run: pytest exited {returncode} without writing a report", file=sys.stderr)
        return returncode or 2
    document = report.load(report_json)
    written = _write_outputs(document, out)
    print()
    print(render.text(document))
    print("\nwrote " + ", ".join(map(str, written)))
    return 0 if report.conforms(document) else 1


# --- merge ---------------------------------------------------------------------------------


def _merge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="reports of several runs")
    parser.add_argument("--out", default=None, metavar="DIR", help="write report.json/.md/.html of the merge")
    parser.add_argument("--markdown", action="store_true", help="print the Markdown (for a CI job summary)")


def _merge(args: argparse.Namespace) -> int:
    from conformance import render, report

    names = [str(p) for p in args.reports]
    document = report.merge(_load_reports(args.reports), names=names)
    print(render.markdown(document) if args.markdown else render.text(document))
    if args.out:
        written = _write_outputs(document, Path(args.out))
        print("\nwrote " + ", ".join(map(str, written)), file=sys.stderr if args.markdown else sys.stdout)
    return 0 if report.conforms(document) else 1


# --- diff ----------------------------------------------------------------------------------


def _diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", metavar="OLD.json")
    parser.add_argument("new", metavar="NEW.json")


def _diff(args: argparse.Namespace) -> int:
    from conformance import report

    old, new = _load_reports([args.old, args.new])
    changes = report.diff(old, new)
    for title, items in changes.items():
        if not items:
            continue
        print(f"{title} ({len(items)}):")
        for item in items:
            states = f"{item['old'] or 'absent'} -> {item['new'] or 'absent'}"
            line = f"  {item['nodeid']} [{', '.join(item['clauses'])}] {states}"
            if item.get("new_reason") or item.get("old_reason"):
                line += f" (reason: {item.get('old_reason')!r} -> {item.get('new_reason')!r})"
            print(line)
            if item.get("rerun"):
                print(f"    rerun: {item['rerun']}")
    if not any(changes.values()):
        print("no changes")
    return 1 if changes["new failures"] else 0


RUN = Command("run the conformance suite on this machine and write the report", _run_arguments, _run)
MERGE = Command("merge the reports of several runs into one matrix", _merge_arguments, _merge)
DIFF = Command("list new failures, fixes and changed skips between two reports", _diff_arguments, _diff)

COMMANDS: dict[str, str] = {
    "run": "conformance.cli:RUN",
    "merge": "conformance.cli:MERGE",
    "diff": "conformance.cli:DIFF",
    "mutants": "conformance.mutation:MUTANTS",
    "bench": "conformance.bench:BENCH",
}


def _resolve(target: str) -> Command:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opconform", description="op conformance suite and report")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, target in COMMANDS.items():
        command = _resolve(target)
        command.add_arguments(sub.add_parser(name, help=command.help, description=command.help))
    return parser


def main(argv: list[str] | None = None) -> int:
    from conformance.report import ReportError

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        command = _resolve(COMMANDS[argv[0]])
        if command.main is not None:
            return command.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return _resolve(COMMANDS[args.command]).handler(args)
    except ReportError as exc:
        print(f"opconform {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

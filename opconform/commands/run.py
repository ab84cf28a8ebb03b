"""``opconform run``: the installed suite (``pytest --pyargs conformance``) on this machine, then
the report (report.json, report.md, report.html) and the summary."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path

from conformance import devices, options
from opconform import fold, render, report
from opconform.commands import (
    EXIT_DEVICE_ABSENT,
    EXIT_EMPTY,
    EXIT_INCOMPLETE,
    help_for,
    pytest_usage_line,
    usage_error,
    writable_dir,
)

HELP = help_for("run")
PROFILES = ("dev", "ci", "thorough")  # the suite's Hypothesis profiles, registered as opconform-NAME
PYTEST_USAGE_ERROR = 4
COLLECT_ONLY = ("--collect-only", "--co")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", action="append", default=[], metavar="NAME", help="backend (repeatable)")
    parser.add_argument("--device", action="append", default=[], type=device, metavar="DEVICE",
                        help="cpu, cuda or npu (every visible card), or cards of the visible list: "
                             "npu:3, npu:0,1,2,3 (repeatable; one worker per card with -n auto)")  # fmt: skip
    parser.add_argument(
        "--backend-module", action="append", default=[], metavar="MODULE[:ATTR]", help="external backends"
    )
    parser.add_argument("--expectations", action="append", default=[], metavar="PATH",
                        help="expectations manifest or directory of them (repeatable)")  # fmt: skip
    parser.add_argument("--profile", choices=PROFILES, default=None, help="Hypothesis profile")
    parser.add_argument("-n", dest="workers", default=None, type=workers, metavar="N",
                        help="xdist workers: N (0 or more), auto or logical")  # fmt: skip
    parser.add_argument("--timeout", type=options.seconds, default=None, metavar="SECONDS",
                        help="per-case time limit (default 300, 3000 with --profile thorough; 0: none); "
                             "a case past it is reported as 'timeout'")  # fmt: skip
    parser.add_argument("--first-failure", action="store_true",
                        help="after a clause's first failed case on a backend and device, skip "
                             "its remaining cases there (--opconform-first-failure); "
                             "exit 1 on a failure")  # fmt: skip
    parser.add_argument("--strict", action="store_true",
                        help="SHOULD clauses' failures fail the run too (exit 1); by default only MUST "
                             "failures do (--opconform-strict)")  # fmt: skip
    parser.add_argument("--model", default=None, metavar="NAME",
                        help="also run the properties at a built-in model profile's parameters "
                             "(spec/models.md) and print its readiness table")  # fmt: skip
    parser.add_argument("--model-config", default=None, metavar="PATH",
                        help="like --model, for a local config.json (read with transformers' "
                             "class)")  # fmt: skip
    parser.add_argument("--model-only", action="store_true",
                        help="with --model or --model-config: skip the generic run")  # fmt: skip
    parser.add_argument("--fold-cards", action="store_true",
                        help="one column for a backend's cards that agree; a card that disagrees keeps "
                             "its own and heads the report")  # fmt: skip
    parser.add_argument("--out", default="opconform-report", metavar="DIR",
                        help="where report.json/.md/.html go (default: %(default)s)")  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed on to pytest")


def device(value: str) -> str:
    """``--device``'s value, its syntax checked here (its cards against the runtime by the plugin)."""
    try:
        devices.parse(value)
    except devices.DeviceError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--device ")) from exc
    return value


def workers(value: str) -> str:
    """``-n``'s value as pytest-xdist takes it: a count of 0 or more, ``auto`` or ``logical``."""
    if value in ("auto", "logical") or (value.isdigit() and int(value) >= 0):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: expected a number of workers (0 or more), auto or logical")


def plugin_registered() -> bool:
    """Whether an installed opconform registers the plugin through the ``pytest11`` entry point."""
    from importlib import metadata

    return any(ep.value == "conformance.harness.plugin" for ep in metadata.entry_points(group="pytest11"))


def pytest_command(args: argparse.Namespace, report_json: Path) -> list[str]:
    """The pytest command line ``opconform run`` executes (the installed suite, via --pyargs).

    From a checkout that is not pip-installed (``python -m opconform.cli`` with the checkout on
    PYTHONPATH, as on a CUDA host with its own torch) no entry point loads the plugin, and the
    checkout's conftest.py is not loaded when the run starts outside the checkout: load it by name.
    """
    # -rsxXE: the skip reasons (the checkout's addopts has -ra; an installed run has no ini file), not
    # the failures: with --tb=no this command prints each failure once, in its own report below
    # (pytest's FAILURES section and short summary would print each twice more). -- --tb=long undoes it.
    command = [sys.executable, "-m", "pytest", "--pyargs", "conformance", "-p", "no:cacheprovider",
               "-rsxXE", "--tb=no", f"--opconform-json={report_json}"]  # fmt: skip
    if not plugin_registered():
        command += ["-p", "conformance.harness.plugin"]
    command += [f"--backend={b}" for b in args.backend]
    command += [f"--device={d}" for d in args.device]
    command += [f"--backend-module={m}" for m in args.backend_module]
    command += [f"--opconform-expectations={os.path.abspath(e)}" for e in args.expectations]
    if args.timeout is not None:
        command.append(f"--opconform-timeout={args.timeout:g}")
    if args.profile:
        command.append(f"--hypothesis-profile=opconform-{args.profile}")
    if getattr(args, "first_failure", False):
        command.append("--opconform-first-failure")
    if getattr(args, "strict", False):
        command.append("--opconform-strict")
    if args.workers is not None:
        command += ["-n", str(args.workers)]
    elif importlib.util.find_spec("xdist") is not None:
        # One supervised worker: a case that kills its process (an aborting kernel) is a crash
        # and the worker restarts; run in this process, the run would die without a report.
        command += ["-n", "1"]
    else:
        command += ["-p", "no:xdist"]
    return command + list(args.pytest_args)


class StderrRelay:
    """Copies pytest's stderr to ours as it comes, except a usage error: from pytest's first
    ``ERROR:`` line on, the lines are held, so that a refused argument (exit 4, no report) is
    reported as one ``opconform run: error:`` line; in any other run they are written at the end."""

    def __init__(self, stream):
        self.held: list[str] = []
        self.thread = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self.thread.start()

    def _copy(self, stream) -> None:
        for line in stream:
            if self.held or line.startswith("ERROR: "):
                self.held.append(line)
            else:
                sys.stderr.write(line)
                sys.stderr.flush()

    def finish(self, *, usage_error_status: bool) -> str | None:
        """The usage line when pytest refused its arguments; otherwise the held lines are written."""
        self.thread.join(timeout=10)
        line = pytest_usage_line("".join(self.held)) if usage_error_status else None
        if line is None:
            sys.stderr.write("".join(self.held))
            sys.stderr.flush()
        return line


def run_pytest(command: list[str]) -> tuple[int, StderrRelay]:
    """Run pytest; on Ctrl-C (SIGINT reaches pytest too, as the terminal's process group) wait for
    it to write the partial report rather than kill it as ``subprocess.call`` would. A second
    Ctrl-C kills it (no report)."""
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, errors="replace")
    relay = StderrRelay(proc.stderr)
    try:
        return proc.wait(), relay
    except KeyboardInterrupt:
        print("opconform run: interrupted: waiting for pytest to write the partial report "
              "(Ctrl-C again to stop it)", file=sys.stderr)  # fmt: skip
    try:
        return proc.wait(), relay
    except KeyboardInterrupt:
        proc.kill()
        return proc.wait(), relay


def model_options(args: argparse.Namespace) -> list[str]:
    """MODEL-RUN: the plugin options of ``--model`` / ``--model-config`` (none without them)."""
    if args.model is not None:
        return [f"--opconform-model={args.model}"]
    if args.model_config is not None:
        return [f"--opconform-model-config={os.path.abspath(args.model_config)}"]
    return []


def model_problem(args: argparse.Namespace) -> str | None:
    """Why ``--model`` / ``--model-config`` gives no profile (an unknown name, a config that is not
    JSON, names no transformers class or cannot be derived), or None: the profile is derived here,
    as the profile run's plugin will, before any run starts."""
    if args.model is None and args.model_config is None:
        return None
    from conformance.models import configs

    try:
        if args.model is not None:
            configs.by_name(args.model)
        else:
            configs.from_file(args.model_config)
    except configs.ModelError as exc:
        option = "--model" if args.model is not None else "--model-config"
        return f"{option}: {exc}"
    return None


def pytest_run(
    args: argparse.Namespace, report_json: Path, extra: list[str]
) -> tuple[int | None, dict | None]:
    """One pytest run writing ``report_json``: (exit status, None) when it refused or wrote nothing,
    else (None, its document)."""
    report_json.unlink(missing_ok=True)
    command = pytest_command(args, report_json)
    command[command.index("-rsxXE") + 1 : command.index("-rsxXE") + 1] = extra
    if args.workers is None and "-n" not in command:
        print("opconform run: pytest-xdist is not installed: the cases run in one process, and a backend "
              "that kills it ends the run without a report", file=sys.stderr)  # fmt: skip
    print("opconform run:", " ".join(command), flush=True)
    returncode, relay = run_pytest(command)  # pytest shows the progress
    refused = relay.finish(usage_error_status=returncode == PYTEST_USAGE_ERROR and not report_json.exists())
    if refused:
        return usage_error("run", refused), None
    if not report_json.exists():
        print(f"opconform run: pytest exited {returncode} without writing a report", file=sys.stderr)
        return EXIT_INCOMPLETE, None
    return None, report.load(report_json)


def run(args: argparse.Namespace) -> int:
    if args.workers is not None and importlib.util.find_spec("xdist") is None:
        return usage_error("run", "-n needs pytest-xdist (pip install pytest-xdist)")
    for path in args.expectations:
        if not Path(path).exists():
            return usage_error("run", f"--expectations {path}: no such file or directory")
    if args.model is not None and args.model_config is not None:
        return usage_error("run", "--model and --model-config: give one of them")
    if args.model_only and not model_options(args):
        return usage_error("run", "--model-only needs --model or --model-config")
    if args.model_config is not None and not Path(args.model_config).is_file():
        return usage_error("run", f"--model-config {args.model_config}: no such file")
    problem = model_problem(args)
    if problem:  # found by the profile run's pytest, it came after the whole generic run
        return usage_error("run", problem)
    out = Path(args.out)
    why = writable_dir(out)
    if why:
        return usage_error("run", f"--out {out}: cannot write there: {why}")
    report_json = (out / "report.json").resolve()
    runs = [] if args.model_only else [("generic", [])]
    if model_options(args):  # MODEL-RUN: the profile's own run, merged beside the generic one
        runs.append((args.model or "model", model_options(args)))
    documents = []
    for name, extra in runs:
        path = report_json if len(runs) == 1 else (out / f"report-{name}.json").resolve()
        status, document = pytest_run(args, path, extra)
        if document is None:
            return status
        documents.append(document)
    document = documents[0] if len(documents) == 1 else report.merge(documents, names=[n for n, _ in runs])
    if args.fold_cards:
        document = fold.fold(document)
    written = render.write_outputs(document, out)
    if document["results"] or document.get("absent_devices"):
        print()
        print(render.text(document))
    print("\nwrote " + ", ".join(map(str, written)))
    absent = document.get("absent_devices") or {}
    if absent:
        devices = "; ".join(f"{d} ({why})" for d, why in absent.items())
        print(f"opconform run: requested device(s) absent: {devices}", file=sys.stderr)
        return EXIT_DEVICE_ABSENT
    if document.get("exitstatus") in (2, 3):  # interrupted, or a pytest internal error
        print(
            f"opconform run: pytest exited {document['exitstatus']}: the run did not complete",
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    if not document["results"]:
        if document.get("exitstatus") == 0 and any(a in COLLECT_ONLY for a in args.pytest_args):
            print("opconform run: collect-only: the cases were listed, none ran", file=sys.stderr)
            return 0
        print(f"opconform run: no case ran (pytest exit {document.get('exitstatus')}: nothing collected, "
              "or every case deselected): the matrix is empty", file=sys.stderr)  # fmt: skip
        return EXIT_EMPTY
    print(verdict_line(document, strict=args.strict))
    return 0 if report.conforms(document, strict=args.strict) else 1


def verdict_line(document: dict, *, strict: bool) -> str:
    """The run's last line: its MUST and SHOULD failure counts and what they do to the exit status."""
    must, should = len(report.failures(document)), len(report.failures(document, level=report.SHOULD))
    said = f"{must} MUST failure{'s' * (must != 1)}" if must else "no MUST failure"
    said += f", {should} SHOULD failure{'s' * (should != 1)}"
    if should and not strict:
        said += " (robustness the field does not promise; --strict fails the run on them)"
    return f"opconform run: {said}"

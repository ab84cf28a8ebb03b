"""One module per ``opconform`` subcommand, each with ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; ``opconform.cli`` imports only the chosen one.

The exit statuses every subcommand keeps (docs/reports.md, exit statuses) are named here, and bad input
is reported by ``usage_error``: one line ``opconform COMMAND: error: ...`` on stderr, status 2.
"""

from __future__ import annotations

import sys

# name -> (module, help); the help is here so `opconform --help` imports no subcommand.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("opconform.commands.run", "run the conformance suite on this machine and write the report"),
    "merge": ("opconform.commands.merge", "merge the reports of several runs into one matrix"),
    "diff": ("opconform.commands.diff", "list new failures, fixes and changed skips between two reports"),
    "dashboard": (
        "opconform.commands.dashboard",
        "build a static site of many runs' reports: matrices per product, history, clauses, diffs",
    ),
    "mutants": ("opconform.commands.mutants", "run the suite against every mutant and print the kill matrix"),
    "bench": (
        "opconform.commands.bench",
        "time every op on every backend and device against the oracle and its peers",
    ),
    # capture / replay / export (docs/capture.md)
    "replay": ("opconform.commands.replay", "judge a capture's (or an msprobe dump's) calls by the oracles"),
    "export": ("opconform.commands.export", "write golden cases (safetensors or Ascend-style .bin) of an op"),
    "judge": ("opconform.commands.judge", "judge the outputs a foreign harness wrote for exported cases"),
}

EXIT_USAGE = 2  # a bad argument, named in one line
EXIT_DEVICE_ABSENT = 3  # a device named with --device is absent
EXIT_INCOMPLETE = 4  # pytest crashed or was interrupted
EXIT_EMPTY = 5  # `run`: no case ran (nothing collected, or everything deselected): the matrix is empty


def help_for(name: str) -> str:
    return COMMANDS[name][1]


def usage_error(command: str, message: str) -> int:
    """Print the one line ``opconform COMMAND: error: MESSAGE`` on stderr; returns exit status 2."""
    print(f"opconform {command}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return EXIT_USAGE


def writable_dir(path) -> str | None:
    """None when ``path`` is (or can be made) a directory we can write in, else why not (for --out)."""
    from pathlib import Path

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".opconform-write-test"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def pytest_usage_line(stderr: str) -> str | None:
    """The one line saying why pytest refused its arguments (exit 4), from its stderr: the
    ``...: error: ...`` line of its argument parser (an unknown option) or an ``ERROR: ...`` line
    (the plugin's usage errors, a path that does not exist); None when there is none."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:  # argparse: "ERROR: usage: ..." then "__main__.py: error: unrecognized ..."
        head, sep, message = line.partition(": error: ")
        # the program name: "__main__.py" (pytest < 9.2) or "python -m pytest" / "pytest" (9.2)
        if sep and (" " not in head or head.endswith("pytest")) and not head.startswith("ERROR"):
            return message
    for line in lines:
        if line.startswith("ERROR: ") and not line.startswith("ERROR: usage:"):
            return line[len("ERROR: ") :]
    return None

"""One module per ``opconform`` subcommand, each with ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; ``opconform.cli`` imports only the chosen one."""

from __future__ import annotations

# name -> (module, help); the help is here so `opconform --help` imports no subcommand.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("opconform.commands.run", "run the conformance suite on this machine and write the report"),
    "merge": ("opconform.commands.merge", "merge the reports of several runs into one matrix"),
    "diff": ("opconform.commands.diff", "list new failures, fixes and changed skips between two reports"),
    "mutants": ("opconform.commands.mutants", "run the suite against every mutant and print the kill matrix"),
    "bench": (
        "opconform.commands.bench",
        "time every op on every backend and device against the oracle and its peers",
    ),
}


def help_for(name: str) -> str:
    return COMMANDS[name][1]


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

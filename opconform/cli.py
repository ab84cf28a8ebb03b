"""The ``opconform`` console script.

``COMMANDS`` maps each subcommand to its module under ``opconform.commands`` (exposing ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``) and its one-line help. Only the chosen
subcommand's module is imported, so ``opconform merge``, ``diff`` and ``--help`` run without
torch. Bad input is one line on stderr, ``opconform COMMAND: error: ...``, and exit status 2; a
reader that closes the pipe early (``opconform diff A B | head``) ends the output quietly, and
the command finishes with its own status.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from opconform.commands import COMMANDS, usage_error


def load_command(name: str):
    """The module of subcommand ``name``."""
    return importlib.import_module(COMMANDS[name][0])


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (and exit 2, the usage-error status)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``chosen``'s module is imported to add its arguments. The chosen
    subcommand's parser is ``parser.chosen`` (it reports arguments left over, as ``diff a b c``)."""
    parser = Parser(prog="opconform", description="op conformance suite and report")
    parser.chosen = None
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        subparser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            load_command(name).add_arguments(subparser)
            parser.chosen = subparser
    return parser


class PipeSafeStdout:
    """``sys.stdout`` that, once the reader has closed the pipe, sends the rest to /dev/null
    (the SIGPIPE convention without the signal: no BrokenPipeError traceback)."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _quietly(self, operation, *args):
        try:
            return operation(*args)
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
            return operation(*args)

    def write(self, text):
        return self._quietly(self._stream.write, text)

    def flush(self):
        return self._quietly(self._stream.flush)


def main(argv: list[str] | None = None) -> int:
    from conformance.results import ResultsError

    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(chosen)
    args, extra = parser.parse_known_args(argv)
    if extra:
        (parser.chosen or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    real_stdout = sys.stdout
    piped = _has_fileno(real_stdout)
    if piped:
        sys.stdout = PipeSafeStdout(real_stdout)
    try:
        return load_command(args.command).run(args)
    except ResultsError as exc:
        return usage_error(args.command, exc)
    finally:
        if piped:
            sys.stdout.flush()
            sys.stdout = real_stdout


def _has_fileno(stream) -> bool:
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):  # pytest's capture, io.StringIO
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())

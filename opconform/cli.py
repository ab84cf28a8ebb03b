"""The ``opconform`` console script.

``COMMANDS`` maps each subcommand to its module under ``opconform.commands`` (exposing ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``) and its one-line help. Only the chosen
subcommand's module is imported, so ``opconform merge``, ``diff`` and ``--help`` run without
torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from opconform.commands import COMMANDS


def load_command(name: str):
    """The module of subcommand ``name``."""
    return importlib.import_module(COMMANDS[name][0])


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (and exit 2, the usage-error status)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``chosen``'s module is imported to add its arguments."""
    parser = Parser(prog="opconform", description="op conformance suite and report")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        subparser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            load_command(name).add_arguments(subparser)
    return parser


def main(argv: list[str] | None = None) -> int:
    from conformance.results import ResultsError

    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    args = build_parser(chosen).parse_args(argv)
    try:
        return load_command(args.command).run(args)
    except ResultsError as exc:
        print(f"opconform {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

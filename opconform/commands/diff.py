"""``opconform diff``: new failures (with rerun commands), new SHOULD failures, fixes, changed skips,
added and removed cases between two reports; exit 1 on a regression (with --strict, a new SHOULD
failure is one). Then each paired case's error ratios, NEW's over OLD's against the oracle
(opconform.ratios: reported, never judged)."""

from __future__ import annotations

import argparse

from opconform import ratios, report
from opconform.commands import help_for

HELP = help_for("diff")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", metavar="OLD.json")
    parser.add_argument("new", metavar="NEW.json")
    parser.add_argument("--strict", action="store_true", help="a new SHOULD failure is a regression too")


def run(args: argparse.Namespace) -> int:
    old, new = report.load(args.old), report.load(args.new)
    changed = report.product_changes(old, new)  # DEV-PRODUCT: what the two runs ran on
    if changed:
        print(f"product changed ({len(changed)}): " + "; ".join(changed))
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
    for line in ratios.lines(ratios.error_ratios(old, new)):
        print(line)
    return 1 if changes["new failures"] or (args.strict and changes["new SHOULD failures"]) else 0

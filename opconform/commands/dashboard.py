"""``opconform dashboard REPORTS... --out DIR``: a static site across many runs and machines (a clause
x product matrix per family, each product's history, a page per clause, a diff of any two runs).

A non-empty ``--out`` is refused unless ``--overwrite``, which replaces only an earlier dashboard's
pages and data (as ``opconform export --overwrite`` replaces only its case folders).
"""

from __future__ import annotations

import argparse
import re
import shutil
import time
from pathlib import Path

from opconform import dashboard
from opconform.commands import help_for, usage_error, writable_dir

HELP = help_for("dashboard")
# What a dashboard writes (opconform.render_dashboard): --overwrite removes only these.
SITE_ENTRY = re.compile(r"index\.html|diff\.html|(family|product|clause)-[\w.-]+\.html|data")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="reports of many runs, any order")
    parser.add_argument("--out", required=True, metavar="DIR", help="the site's folder (empty or new)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an earlier dashboard's pages in DIR"
    )


def _earlier_site(out: Path, overwrite: bool) -> str | list[Path]:
    """The earlier dashboard's entries to remove, or why ``out`` cannot take the site."""
    if out.exists() and not out.is_dir():
        return f"--out {out}: exists and is not a folder"
    held = sorted(out.iterdir()) if out.is_dir() else []
    if held and not overwrite:
        return (
            f"--out {out}: not empty ({len(held)} entries, e.g. {held[0].name}); pass --overwrite to "
            "replace an earlier dashboard there, or choose an empty folder"
        )
    other = [p for p in held if not SITE_ENTRY.fullmatch(p.name)]
    if other:
        name = other[0].name
        return f"--out {out}: --overwrite replaces only an earlier dashboard, and {name} is not part of one"
    return held


def write(site: dashboard.Site, out: Path) -> list[Path]:
    """Every page and data file of the site into ``out``."""
    from opconform import render_dashboard, render_dashboard_data

    table = dashboard.transitions()
    pages = {**render_dashboard.pages(site, table), "diff.html": render_dashboard_data.diff_html(site)}
    written = []
    for name, content in pages.items():
        (out / name).write_text(content, encoding="utf-8")
        written.append(out / name)
    return written + render_dashboard_data.write_data(site, out, table)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    held = _earlier_site(out, args.overwrite)
    if isinstance(held, str):
        return usage_error("dashboard", held)
    started = time.perf_counter()
    site = dashboard.build([str(p) for p in args.reports])  # a bad report: ResultsError, one line
    why = writable_dir(out)
    if why:
        return usage_error("dashboard", f"--out {out}: cannot write there: {why}")
    for path in held:  # the earlier dashboard's pages and data/, nothing else (_earlier_site)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    written = write(site, out)
    size = sum(p.stat().st_size for p in written)
    seconds = time.perf_counter() - started
    print(
        f"wrote {out / 'index.html'}: {len(site.runs)} runs, {len(site.products)} products, "
        f"{len(written)} files, {size / 1e6:.2f} MB in {seconds:.1f} s"
    )
    return 0

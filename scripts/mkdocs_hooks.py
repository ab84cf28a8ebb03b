"""mkdocs hooks (mkdocs.yml): the repository's README and spec/ as pages of the site.

mkdocs reads only docs_dir, but the pages link to the repository's own files by their relative
paths, so that they read the same on GitHub: README.md links pages in docs/, and those link
../README.md and the spec files in ../spec/. ``on_files`` adds README.md (as the site's
index.md) and every spec/*.md (as spec/*.md) to the site; ``on_page_markdown`` rewrites each
relative link from the repository's layout to the site's before mkdocs validates it, so a link to
a file that is not a page (a missing page, a source file) is still a strict-build error.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parent.parent
# site path -> repository path of the pages added here
EXTRA = {"index.md": "README.md"} | {
    f"spec/{p.name}": f"spec/{p.name}" for p in sorted(REPO.glob("spec/*.md"))
}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _repo_path(site_path: str) -> str:
    return EXTRA.get(site_path, f"docs/{site_path}")


def _site_path(repo_path: str) -> str | None:
    for site, repo in EXTRA.items():
        if repo == repo_path:
            return site
    return repo_path.removeprefix("docs/") if repo_path.startswith("docs/") else None


def on_files(files: Files, config) -> Files:
    for site, repo in EXTRA.items():
        files.append(File.generated(config, site, abs_src_path=str(REPO / repo)))
    return files


def rewrite(markdown: str, site_path: str) -> str:
    """Each relative link of the page at ``site_path``, from the repository's layout to the site's."""
    here = posixpath.dirname(_repo_path(site_path))
    site_here = posixpath.dirname(site_path)

    def replace(match: re.Match) -> str:
        url = match.group(1)
        if re.match(r"^[a-z]+:|^#|^/", url):
            return match.group(0)
        path, _, anchor = url.partition("#")
        target = posixpath.normpath(posixpath.join(here, path))
        site = _site_path(target)
        if site is None:  # not a page: left as it is, so the strict build reports it
            return match.group(0)
        new = posixpath.relpath(site, site_here or ".")
        return f"]({new}{'#' + anchor if anchor else ''})"

    return LINK.sub(replace, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return rewrite(markdown, page.file.src_uri)

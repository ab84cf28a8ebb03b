"""The documentation matches the code: every command, option and repository path that README.md
and docs/ name in code (`...` spans and fenced blocks) exists.

- `opconform CMD --opt`: CMD is a subcommand and --opt one of its argparse options (pytest's
  arguments after a lone `--` are checked as below);
- every `--opconform-*`, `--backend*`, `--device`, `--focus-*` anywhere, and any option of a
  `pytest ...` command line of those prefixes or `--hypothesis-*`: an option of the suite's plugin
  (conformance.harness.plugin.pytest_addoption) or of Hypothesis's pytest plugin;
- a path under one of the repository's own folders (`conformance/harness/plugin.py`): a file or folder
  of the checkout.

The README names every subcommand and links every docs page, its ```python blocks run as pasted,
and every docs page a Python file names exists. The mkdocs site build (`mkdocs build --strict`,
.ci/run) checks the Markdown links; this checks what links cannot.
"""

from __future__ import annotations

import re
from pathlib import Path

import _hypothesis_pytestplugin
import pytest

from conformance.harness import plugin
from opconform.cli import build_parser
from opconform.commands import COMMANDS

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
OWN_FOLDERS = ("spec", "reference", "backends", "conformance", "opconform", "mutants", "benchmarks",
               "tests", "expectations", "docs", "scripts", ".ci", ".github")  # fmt: skip
SUITE_OPTION = re.compile(r"(?<![\w-])--(?:opconform-|backend|device|focus-)[\w-]*")
PYTEST_OPTION = re.compile(r"(?<![\w-])--(?:opconform-|backend|device|focus-|hypothesis-)[\w-]*")
LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][\w-]*")
OWN_PATH = re.compile(r"(?<![\w.<-])((?:%s)/[\w./<>*-]*)" % "|".join(map(re.escape, OWN_FOLDERS)))  # noqa: UP031


class _Recorder:
    """Stands in for pytest's parser and its groups: records the long option names added."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def getgroup(self, *_args, **_kwargs):
        return self

    def addoption(self, *names, **_kwargs) -> None:
        self.names.update(n for n in names if n.startswith("--"))

    def addini(self, *_args, **_kwargs) -> None:
        pass


def _plugin_options() -> set[str]:
    recorder = _Recorder()
    plugin.pytest_addoption(recorder)
    _hypothesis_pytestplugin.pytest_addoption(recorder)
    return recorder.names


def _command_options(name: str) -> set[str]:
    parser = build_parser(name)
    sub = next(a for a in parser._actions if a.choices and name in a.choices).choices[name]
    return {s for action in sub._actions for s in action.option_strings if s.startswith("--")}


def code_snippets(text: str) -> list[str]:
    """Fenced blocks' lines and inline code spans (which may wrap across lines), one string each."""
    snippets, prose, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced and not line.startswith(("---", "===")):  # not a terminal's rule line
            snippets.append(line)
        else:
            prose.append(line)
    snippets += [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", "\n".join(prose))]
    return snippets


def problems(
    docs: dict[str, str], commands: dict[str, set[str]], pytest_options: set[str]
) -> list[tuple[str, str, str]]:
    """(document, the name that does not exist, why) for each problem."""
    found = []
    for name, text in docs.items():
        for option in sorted(set(SUITE_OPTION.findall(text)) - pytest_options):
            found.append((name, option, "is no option of the suite's plugin"))
        for snippet in code_snippets(text):
            for match in re.finditer(r"(?<![\w./-])opconform\s+([^\s|;&]+)(.*)", snippet):
                command, rest = match.group(1), match.group(2).split(" -- ", 1)
                if command.endswith(":"):  # the tool's own output line ("opconform run: no MUST failure")
                    continue
                if command not in commands:
                    found.append((name, f"opconform {command}", f"is no subcommand: {snippet!r}"))
                    continue
                for option in sorted(set(LONG_OPTION.findall(rest[0])) - commands[command]):
                    found.append((name, option, f"is no option of opconform {command}: {snippet!r}"))
                for option in sorted(
                    set(PYTEST_OPTION.findall(rest[1] if len(rest) > 1 else "")) - pytest_options
                ):
                    found.append((name, option, f"(after --) is no option of the plugins: {snippet!r}"))
            if re.match(r"^(\S+=\S+ )*(python -m )?pytest\b", snippet):
                for option in sorted(set(PYTEST_OPTION.findall(snippet)) - pytest_options):
                    found.append((name, option, f"is no option of the plugins: {snippet!r}"))
            for path in re.findall(OWN_PATH, snippet):
                if "<" not in path and "*" not in path and not (REPO / path.rstrip(".")).exists():
                    found.append((name, path, "does not exist"))
    return found


@pytest.fixture(scope="module")
def known():
    return {name: _command_options(name) for name in COMMANDS}, _plugin_options()


def test_the_docs_name_only_what_exists(known):
    """Every command, option and path the README and docs/ name exists (module docstring)."""
    docs = {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in DOCS}
    found = problems(docs, *known)
    assert not found, "\n".join(f"{doc}: {item} {why}" for doc, item, why in found)


def test_the_check_can_fail(known):
    """A misspelt option, subcommand or path is reported; the real ones are not."""
    text = (
        "`opconform run --backend-module m --no-such-flag -- --opconform-json x --opconform-nope`\n"
        "```sh\nopconform nosuch --out x\npytest --pyargs conformance --hypothesis-seedz=1\n```\n"
        "`--opconform-timeout S` and `conformance/no_such_module.py` and `conformance/harness/plugin.py`\n"
    )
    found = {item for _, item, _ in problems({"doc.md": text}, *known)}
    assert found == {"--no-such-flag", "--opconform-nope", "opconform nosuch", "--hypothesis-seedz",
                     "conformance/no_such_module.py"}, found  # fmt: skip


def test_the_readme_names_every_subcommand_and_links_every_page():
    """The README never named capture's replay, export and judge nor linked docs/capture.md: it
    names each subcommand as `opconform NAME` and links every page of docs/ (generated/ aside)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    unnamed = [f"opconform {name}" for name in COMMANDS if f"opconform {name}" not in readme]
    unlinked = [p.name for p in sorted((REPO / "docs").glob("*.md")) if f"(docs/{p.name})" not in readme]
    assert not unnamed and not unlinked, (unnamed, unlinked)


DOCS_PAGE = re.compile(r"(?<![\w./-])(docs/[\w./-]+\.md)")


def test_the_sources_name_only_docs_pages_that_exist():
    """tests/test_capture_example.py named a docs page that never existed (capture-walkthrough.md):
    every docs page a Python file of the repository names exists."""
    sources = [p for folder in OWN_FOLDERS for p in sorted((REPO / folder).rglob("*.py"))]
    missing = [
        f"{path.relative_to(REPO)}: {page}"
        for path in [*sources, *sorted(REPO.glob("*.py"))]
        for page in DOCS_PAGE.findall(path.read_text(encoding="utf-8"))
        if not (REPO / page).exists()
    ]
    assert not missing, missing


SHOWN_VALUE = re.compile(r"^(\w[\w.]*\(.*\))\s+#\s+(\w+\(.*\))$")  # `call(...)  # Repr(...)`


def test_the_readme_python_snippets_run_as_written(tmp_path, monkeypatch):
    """The README's oracle snippet called an undefined my_gelu_and_mul on undefined k, v: every
    ```python block runs as pasted, and a line showing its value in a comment shows that value."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S)
    assert len(blocks) >= 2, "the README's python snippets were not found"
    import torch

    monkeypatch.chdir(tmp_path)  # a snippet writes nothing into the checkout
    for number, block in enumerate(blocks):
        torch.manual_seed(0)
        namespace: dict = {"__name__": f"readme_snippet_{number}"}
        exec(compile(block, f"README.md python block {number}", "exec"), namespace)
        for line in block.splitlines():
            shown = SHOWN_VALUE.match(line)
            if shown:
                assert repr(eval(shown.group(1), namespace)) == shown.group(2), line

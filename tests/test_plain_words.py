"""What the suite says to a user in their own terms: a file path given as --backend-module, a
backend op returning None, and the skip list, each named without the suite's own code or paths."""

from __future__ import annotations

import pytest

from conformance import selection


class _Config:
    def __init__(self, **options):
        self.options = {"backend": [], "backend_module": [], "device": [], **options}

    def getoption(self, name):
        return self.options[name]


@pytest.mark.parametrize(
    "spec, give",
    [("{dir}/acme_file.py", "acme_file"), ("./acme_file.py", "acme_file"),
     ("{dir}/acme_file.py:OTHER", "acme_file:OTHER"), ("{dir}/acme_file", "acme_file")],
)  # fmt: skip
def test_a_file_path_as_backend_module_says_what_to_give(tmp_path, monkeypatch, spec, give):
    """--backend-module path/to/file.py was importlib's relative-import error (or 'No module named
    path/to/file'): one line saying which module name to give and from which folder."""
    (tmp_path / "acme_file.py").write_text("BACKEND = None\n")
    monkeypatch.chdir(tmp_path)
    spec = spec.format(dir=tmp_path)
    with pytest.raises(pytest.UsageError) as error:
        selection.backends(_Config(backend_module=[spec]))
    said = str(error.value)
    assert said == (
        f"--backend-module {spec}: expected a module name, not a file path: give --backend-module {give} "
        f"and run from {tmp_path} (or set PYTHONPATH={tmp_path})"
    ), said


def test_a_missing_file_and_a_relative_module_name_are_one_line(tmp_path, monkeypatch):
    """A path to no file says so; a relative module name asks for the full one."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pytest.UsageError, match=r"not a file path \(there is no .*nothere\.py\): give"):
        selection.backends(_Config(backend_module=["sub/nothere.py"]))
    with pytest.raises(pytest.UsageError, match=r"\.acme: a relative module name; give its full dotted name"):
        selection.backends(_Config(backend_module=[".acme"]))

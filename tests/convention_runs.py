"""One suite run (one subprocess) for the four field-convention modules: tests/test_field_conventions.py,
test_peer_conventions.py, test_upstream_conventions.py and test_moe_conventions.py judge backends
transcribed from upstream code, each on a few properties; one run spares three processes' fixed cost
(interpreter, torch, collection: about 2.7 CPU-s each).

The run takes the union of the parts' properties with ``--focus-declared-clauses``: every backend declares
``clauses``, those of its part's properties, and is judged on the properties that check one of them, which
are its part's and no others (its part's former ``-k`` exclusions are properties of other clauses). Each
module reads its own backends' cases (``part``); under pytest-xdist the first worker runs it
(``suite_runner.produced_once``) and the others read its result.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import field_conventions
import moe_field_backends
import peer_conventions
import upstream_backends
from suite_runner import produced_once, run_suite

from backends import load_backend_module

HERE = Path(__file__).resolve().parent
# Part -> the ``--backend-module`` specs of its backends and the properties it judges them on.
PARTS = {
    "field": (["field_conventions"], field_conventions.PROPERTIES),
    "peer": (["peer_conventions"], peer_conventions.PROPERTIES),
    "upstream": (list(upstream_backends.MODULES), upstream_backends.PROPERTIES),
    "moe": (["moe_field_backends:BACKENDS"], moe_field_backends.PROPERTIES),
}


def union_paths() -> list[str]:
    """Every part's properties once, a test left out where its whole file is named."""
    paths = list(dict.fromkeys(path for _, properties in PARTS.values() for path in properties))
    return [path for path in paths if "::" not in path or path.partition("::")[0] not in paths]


def _backends(spec: str, folder: Path) -> list:
    """The backends of ``spec`` as the run loads them: a module written to ``folder`` run from its file
    (not imported here), any other imported."""
    module, _, attr = spec.partition(":")
    written = folder / f"{module}.py"
    if not written.exists():
        return load_backend_module(spec)
    found = runpy.run_path(str(written))[attr or "BACKEND"]
    return [found] if hasattr(found, "name") else list(found)


def shared_run(tmp_path_factory) -> dict:
    """The run's JSON results, once per session; ``parts`` maps each part to its backends' names."""

    def produce(folder: Path) -> dict:
        upstream_backends.write(folder)
        parts = {name: [b for s in specs for b in _backends(s, folder)] for name, (specs, _) in PARTS.items()}
        # A backend without clauses would run every property of the union (--focus-declared-clauses keeps
        # them all for it); one with an empty set would run none.
        undeclared = [b.name for found in parts.values() for b in found if not getattr(b, "clauses", None)]
        assert not undeclared, f"backends of the shared convention run without clauses: {undeclared}"
        document = run_suite(
            folder, paths=union_paths(), modules=[spec for specs, _ in PARTS.values() for spec in specs],
            extra=["--device", "cpu", "--focus-declared-clauses"], pythonpath=[HERE, folder],
            profile="ci-noshrink",
        )  # fmt: skip
        document["parts"] = {name: [b.name for b in backends] for name, backends in parts.items()}
        return document

    return produced_once(tmp_path_factory, "opconform-convention-runs", produce)


def part(tmp_path_factory, name: str) -> dict:
    """The shared run's results with only the cases of part ``name``'s backends (its output whole)."""
    document = shared_run(tmp_path_factory)
    own = set(document["parts"][name])
    return {**document, "results": [case for case in document["results"] if case["backend"] in own]}

"""Loading a backend: its module imported from the start folder, its op signatures checked once.

``start_folder_on_path(folder)`` puts the folder a run started in first on ``sys.path``, as
``python -m pytest`` (and so ``opconform run``) does, so ``--backend-module acme_kernels``
imports ``acme_kernels.py`` from that folder under plain ``pytest`` too.

``mismatches(backend)`` compares every op the backend implements with its family protocol
(``backends.protocols``) and returns one line per op whose signature would refuse a call the
protocol allows, e.g. ``backend 'mine': rms_norm(x, weight, epsilon=1e-06) does not match
NormOps.rms_norm(x, weight, *, eps): no parameter 'eps'``. The plugin computes them once, when the
backends are loaded, prints them, and fails that op's cases with the line instead of running
them (each case would otherwise fail with ``unexpected keyword argument 'eps'``).

What must match (what a caller following the protocol may do, the backend must accept):

- the protocol's positional parameters, by position: the backend takes at least as many
  positionally (their names are free: the suite passes them positionally);
- the protocol's keyword-only parameters, by name: the backend has a parameter of that name
  that can be passed by keyword, or ``**kwargs``;
- a parameter with a default in the protocol has one in the backend (callers may omit it);
- every other backend parameter has a default (nobody passes it).

``OPTIONAL_KEYWORDS`` are the exception: protocol keywords that switch on a capability a correct
kernel may lack (fp8 caches), passed only by the cases that need it. A backend without them
matches, and those cases skip as not implemented (``missing_keywords``).

A backend may accept more (a keyword-only option passed positionally, a default the protocol
lacks, extra options with defaults). An op whose signature cannot be read (a builtin, a C
extension) is not checked; a protocol parameter ``**config`` (``dpm_scheduler``) leaves the
keywords free.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest

from conformance.errors import ConformanceError

__all__ = [
    "MISMATCHES",
    "SignatureMismatch",
    "check_loaded",
    "fail_mismatched",
    "mismatches",
    "missing_keywords",
    "protocol_signature",
    "start_folder_on_path",
]

# backend name -> {op: its one line}: what check_loaded found for the run's backends.
MISMATCHES = pytest.StashKey[dict]()

# op -> keywords a backend may lack: only the cases of that capability pass them (KV-FP8-READ).
OPTIONAL_KEYWORDS = {"paged_attention": ("k_scale", "v_scale")}
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class SignatureMismatch(ConformanceError):
    """A case of an op whose signature does not match its protocol: it fails with the one line."""


def start_folder_on_path(folder: str | os.PathLike | None = None) -> bool:
    """Put ``folder`` (default: the current directory) first on ``sys.path`` unless it is already
    there (``""`` counts as the current directory); True when it was added."""
    folder = Path.cwd() if folder is None else Path(folder)
    wanted = folder.resolve()
    for entry in sys.path:
        try:
            if Path(entry or os.curdir).resolve() == wanted:
                return False
        except (OSError, RuntimeError, ValueError):
            continue
    sys.path.insert(0, str(wanted))
    return True


def _plain(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` without annotations (what the one-line message shows)."""
    params = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return signature.replace(parameters=params, return_annotation=inspect.Signature.empty)


def protocol_signature(op: str) -> tuple[str, inspect.Signature]:
    """(``Protocol.op``, the protocol's signature of ``op`` without ``self`` and annotations)."""
    from backends.protocols import FAMILIES, OPS

    protocol = FAMILIES[OPS[op]]
    signature = inspect.signature(getattr(protocol, op))
    params = list(signature.parameters.values())[1:]  # self
    return f"{protocol.__name__}.{op}", _plain(signature.replace(parameters=params))


def _problems(wanted: inspect.Signature, got: inspect.Signature, optional=()) -> list[str]:
    """What a call allowed by ``wanted`` cannot do with ``got``, as short clauses (a missing keyword
    of ``optional`` is none)."""
    want, have = list(wanted.parameters.values()), list(got.parameters.values())
    kinds = {p.kind for p in have}
    var_args, var_kwargs = inspect.Parameter.VAR_POSITIONAL in kinds, inspect.Parameter.VAR_KEYWORD in kinds
    open_keywords = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in want)
    want_positional = [p for p in want if p.kind in _POSITIONAL]
    have_positional = [p for p in have if p.kind in _POSITIONAL]
    by_name = {p.name: p for p in have if p.kind in _BY_KEYWORD}
    problems, used = [], set()
    for i, param in enumerate(want_positional):
        if i < len(have_positional):
            mine = have_positional[i]
            used.add(mine.name)
            if param.default is not param.empty and mine.default is mine.empty:
                problems.append(f"{mine.name!r} has no default (the protocol's {param.name} has one)")
        elif not var_args:
            where = "keyword-only" if param.name in by_name else "missing"
            problems.append(f"{param.name!r} is {where}; the protocol passes it as argument {i + 1}")
    for param in (p for p in want if p.kind == inspect.Parameter.KEYWORD_ONLY):
        mine = by_name.get(param.name)
        if mine is None:
            if not var_kwargs and param.name not in optional:
                problems.append(f"no parameter {param.name!r}")
            continue
        used.add(mine.name)
        position = have_positional.index(mine) if mine.kind in _POSITIONAL else len(want_positional)
        if position < len(want_positional):
            taken = want_positional[position].name
            problems.append(f"{param.name!r} is argument {position + 1}, where the protocol passes {taken!r}")
        elif param.default is not param.empty and mine.default is mine.empty:
            problems.append(f"{param.name!r} has no default (the protocol's is {param.default!r})")
    skip = used | {p.name for p in want}  # a protocol name in the wrong place is reported above
    for mine in have:
        if mine.name in skip or mine.kind in _VARIADIC:
            continue
        if mine.default is mine.empty and not (open_keywords and mine.kind in _BY_KEYWORD):
            problems.append(f"required parameter {mine.name!r} is not in the protocol")
    return problems


def op_mismatch(backend, op: str) -> str | None:
    """The one line saying how ``backend``'s ``op`` does not match its protocol, or None (also for
    an op the backend lacks or whose signature cannot be read)."""
    method = getattr(backend, op, None)
    if not callable(method):
        return None
    try:
        got = _plain(inspect.signature(method))
    except (TypeError, ValueError):  # a builtin or C function without a readable signature
        return None
    where, wanted = protocol_signature(op)
    problems = _problems(wanted, got, OPTIONAL_KEYWORDS.get(op, ()))
    if not problems:
        return None
    name = getattr(backend, "name", type(backend).__name__)
    return f"backend {name!r}: {op}{got} does not match {where}{wanted}: {'; '.join(problems)}"


def missing_keywords(backend, op: str) -> list[str]:
    """The keywords of ``OPTIONAL_KEYWORDS[op]`` that ``backend``'s ``op`` cannot take (none when
    its signature cannot be read or it takes ``**kwargs``)."""
    try:
        params = inspect.signature(getattr(backend, op)).parameters.values()
    except (TypeError, ValueError):
        return []
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    names = {p.name for p in params if p.kind in _BY_KEYWORD}
    return [name for name in OPTIONAL_KEYWORDS.get(op, ()) if name not in names]


def mismatches(backend) -> dict[str, str]:
    """op -> the one line, for every op of ``backends.OPS`` that ``backend`` implements wrongly."""
    from backends.protocols import OPS

    found = {op: op_mismatch(backend, op) for op in OPS}
    return {op: line for op, line in found.items() if line}


def check_loaded(config, selected) -> dict[str, dict[str, str]]:
    """The selected backends' mismatches, once per run (stashed on ``config``), each printed as one
    line (by the process with the terminal: not an xdist worker)."""
    found = {b.name: mismatches(b) for b in selected}
    config.stash[MISMATCHES] = found
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None and not hasattr(config, "workerinput"):
        for line in (line for ops in found.values() for line in ops.values()):
            terminal.write_line(f"opconform: {line}; its cases fail with this line", red=True)
    return found


def fail_mismatched(item) -> None:
    """Fail ``item`` with its op's one line (the case's first clause named), when the backend's op
    does not match the protocol; else nothing. Called before the test body runs."""
    found = item.config.stash.get(MISMATCHES, {})
    backend = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
    op_mark = item.get_closest_marker("op")
    line = found.get(getattr(backend, "name", None), {}).get(op_mark.args[0]) if op_mark else None
    if line is None:
        return
    clauses = [c for mark in item.iter_markers("clause") for c in mark.args]
    error = SignatureMismatch(clauses[0] if clauses else "SIGNATURE", line)
    failure = pytest.fail.Exception(str(error), pytrace=False)  # the one line, no traceback
    # The recorder reads the ConformanceError (its clause) from the context; pytest does not show it.
    failure.__context__, failure.__suppress_context__ = error, True
    raise failure

"""The record of a case whose worker process died: a crash, or a timeout the watchdog ended.

The dead worker sends nothing; what it wrote before the case's call (``conformance.harness.watchdog``'s
side file: the case's facts, the seed of its examples, its rerun line) and the thread stacks its
faulthandler wrote are all there is. The stacks go to a file in the report's folder,
``<report stem>-crashes/<case>.txt``, which the failure's message names (the terminal shows one
line instead of a few hundred).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from conformance import rerun
from conformance.harness import failure_capture
from conformance.harness.activation import state
from conformance.results import Outcome

SAFE = re.compile(r"[^A-Za-z0-9_.\[\]-]+")
MAX_NAME = 120


def stacks_folder(json_path: str | Path) -> Path:
    """Where a run writing ``json_path`` keeps its dead workers' thread stacks."""
    path = Path(json_path)
    return path.with_name(f"{path.stem}-crashes")


def clear_stale(json_path: str | Path | None) -> None:
    """The stacks files of the report this run replaces (an earlier run into the same file)."""
    if not json_path:
        return
    folder = stacks_folder(json_path)
    for old in folder.glob("*.txt") if folder.is_dir() else ():
        old.unlink(missing_ok=True)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def keep_stacks(written: Path, json_path: str | None, nodeid: str) -> Path | None:
    """The dead worker's thread stacks (``written`` by its faulthandler) copied into the report's
    folder, named after the case; None when it wrote none or the run writes no report."""
    if not json_path or not written.is_file() or written.stat().st_size == 0:
        return None
    folder = stacks_folder(json_path)
    folder.mkdir(exist_ok=True)
    name = SAFE.sub("_", nodeid.rpartition("::")[2] or nodeid)[:MAX_NAME]
    kept = folder / f"{name}.txt"
    if kept.exists():
        kept = folder / f"{name}-{written.stem}.txt"
    shutil.copyfile(written, kept)
    return kept


def supervised(command: str) -> str:
    """A rerun line in one xdist worker instead of pytest's own process (``-p no:xdist``), so the
    watchdog ends a native hang again rather than the rerun hanging for ever; with no worker
    restart, as the one case has nothing after it (xdist started a new worker, Python, torch and
    the suite's collection, only to stop it)."""
    words = shlex.split(command)
    for i in range(len(words) - 1):
        if words[i : i + 2] == ["-p", "no:xdist"]:
            words[i : i + 2] = ["-n", "1", "--max-worker-restart=0"]
            break
    return shlex.join(words)


def _fatal_line(stacks: Path | None) -> str | None:
    """faulthandler's first line (``Fatal Python error: Segmentation fault``), the cause of death."""
    if stacks is None:
        return None
    with open(stacks, encoding="utf-8", errors="replace") as text:
        first = text.readline().strip()
    return first if first.startswith("Fatal Python error") else None


def guessed_info(config, nodeid: str) -> dict:
    """A case that died before its call (no side file): its backend and device from the test id's
    ``[backend-device...]`` parameters; ``recorder.crash_facts`` fills in its op and clauses."""
    params = nodeid.rpartition("[")[2]
    info = {**dict.fromkeys(("backend", "device", "op", "dtype")), "clauses": [], "expectations": []}
    run = state(config)
    for backend in sorted((b.name for b in run.backends) if run else (), key=len, reverse=True):
        device = next((d for d in run.devices if params.startswith(f"{backend}-{d}")), None)
        if device:
            info.update(backend=backend, device=device)
            break
    return info


def facts(config, nodeid: str, xdist_line: str, *, entry: dict | None, timed_out: bool, stacks: Path | None):
    """(info, case facts) of ``nodeid``, whose worker died: outcome ``timeout`` when the watchdog
    ended it for this case (``entry`` its side file), else ``crash``; the failure record with the
    example's seed and the rerun line the side file holds, and the stacks file's name."""
    info = dict((entry or {}).get("info") or guessed_info(config, nodeid))
    clause = info["clauses"][0] if timed_out and info.get("clauses") else None
    if timed_out:
        error = (
            f"the case ran past the per-case time limit of {entry['limit']:g} s and never returned to "
            "Python (a hang in native code): the watchdog ended its worker"
        )
        where = f"{info['op']} on backend {info['backend']!r} @ {info['device']}" if info.get("op") else None
        verdict = ": ".join(part for part in (where, f"timeout: {error}") if part)
        verdict = f"[{clause}] {verdict}" if clause else verdict
    else:
        last = xdist_line.strip().splitlines()[-1] if xdist_line.strip() else "its worker died"
        fatal = _fatal_line(stacks)
        error = verdict = f"{last} ({fatal})" if fatal else last
    message = verdict
    if stacks is not None:
        when = "when it was ended" if timed_out else "at the crash"
        message += f"\nthread stacks {when}: {stacks.parent.name}/{stacks.name} in the report's folder"
    command = (entry or {}).get("rerun") or rerun.for_item(config, nodeid)
    failure = {
        "clause": clause,
        "dtype": info.get("dtype"),
        "rerun": supervised(command) if timed_out else command,
        "error": error,
        "message": message,
        "example": (entry or {}).get("example"),
        "relation": f"timeout: {error}" if timed_out else None,
        "kind": failure_capture.judged_as(config, clause, None) if timed_out else None,
    }
    outcome = Outcome.TIMEOUT if timed_out else Outcome.CRASH
    return info, {"outcome": outcome.value, "failure": failure}


def terminal_line(nodeid: str, case: dict, stacks: Path | None) -> str:
    """The one line the terminal shows when a worker dies (its stacks are in the file it names)."""
    if case["outcome"] == Outcome.TIMEOUT.value:
        state, said = "TIMEOUT", "ran past its time limit in native code: its worker was ended"
    else:
        fatal = _fatal_line(stacks)
        state, said = "CRASH", "its worker died" + (f" ({fatal})" if fatal else "")
    where = f" (thread stacks: {stacks.parent.name}/{stacks.name})" if stacks is not None else ""
    return f"opconform: {state} {nodeid}: {said}{where}"

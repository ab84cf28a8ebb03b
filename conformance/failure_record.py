"""The failure record's facts and its one rendering, shared by the terminal and every report.

A failing case's record (``conformance.results.Failure``) holds the verdict (the
ConformanceError's text), the falsifying example, the largest violation and the rerun line. The
example comes from what the run itself knows, never from the suite's source: the case's
parameters (``item.callspec.params``) and the notes Hypothesis attaches to the exception it
re-raises (``Falsifying example: test_x(name=value, ...)``, ``Draw N: value`` for ``st.data()``
draws, ``@reproduce_failure(...)`` where the profile prints blobs). ``lines`` renders a record as
the few lines the terminal, report.md and report.html all show: the verdict first, then the
example, the rest of the message (the violation), the rerun. Torch-free: ``opconform.render``
and ``opconform.report`` use it where torch is not installed.
"""

from __future__ import annotations

import re

KNOWN = ("backend", "device")  # every record names them already; their reprs hold addresses
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # <function f at 0x7f...>: differs per run
# How Hypothesis introduces the falsifying call: "Falsifying example:" up to 6.16x, "Failing test
# case:" since (6.170 writes one argument per line).
EXAMPLE_PREFIXES = ("Falsifying example:", "Falsifying explicit example:", "Failing test case:")
FALSIFYING = re.compile(r"(?:Falsifying (?:explicit )?example|Failing test case): (\w+)\((.*)\)\s*\Z", re.S)
DRAW = re.compile(r"(Draw \d+(?: \([^)]*\))?): (.*)\Z", re.S)
REPRODUCE = re.compile(r"@reproduce_failure\([^)]*\)")
# A number as Python prints one; only the integer literals count in ``size``.
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?![\w.])")


def split_arguments(text: str) -> list[str]:
    """``a=1, b=(2, 3), c='x, y'`` -> its top-level ``name=value`` parts (brackets and quotes kept)."""
    parts, depth, quote, start = [], 0, None, 0
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote and text[i - 1] != "\\" else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [" ".join(p.split()) for p in parts if p.strip()]


def _without_comments(text: str) -> str:
    """Hypothesis's ``  # or any other generated value`` comments dropped (outside quotes)."""
    kept = []
    for line in text.splitlines():
        quote = None
        for i, char in enumerate(line):
            if quote:
                quote = None if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#":
                line = line[:i]
                break
        kept.append(line)
    return "\n".join(kept)


def _shown(text: str) -> str:
    return ADDRESS.sub("", " ".join(text.split()))


def example(params: dict, notes: list[str], *, seed=None) -> dict | None:
    """The falsifying example of a failure: ``arguments`` (name -> repr: the case's parameters,
    then what Hypothesis drew, backend and device left out), ``test``, ``reproduce_failure`` and
    ``seed`` (``--hypothesis-seed``) when known; None when nothing is known."""
    arguments = {k: _shown(repr(v)) for k, v in params.items() if k not in KNOWN}
    record: dict = {"test": None, "arguments": arguments, "reproduce_failure": None, "seed": seed}
    for note in notes:
        note = str(note).strip()
        called, drawn = FALSIFYING.match(note), DRAW.match(note)
        if called:
            record["test"] = called.group(1)
            for part in split_arguments(_without_comments(called.group(2))):
                name, sep, value = part.partition("=")
                if sep and name.strip() not in KNOWN and not value.startswith("data(..."):
                    arguments[name.strip()] = _shown(value)
        elif drawn:
            arguments[drawn.group(1)] = _shown(_without_comments(drawn.group(2)))
        elif REPRODUCE.search(note):
            record["reproduce_failure"] = REPRODUCE.search(note).group(0)
    if not arguments and record["test"] is None and record["reproduce_failure"] is None:
        return None
    return record


def size(record: dict | None) -> tuple:
    """How big a falsifying example is, to find the smallest (README, "Reading a failure"): the
    sum of the integer literals in its arguments (shapes, lengths, block sizes, counts, seeds:
    what Hypothesis shrinks toward 0), then their total text length. No example: largest."""
    arguments = (record or {}).get("arguments") or {}
    if not arguments:
        return (float("inf"), float("inf"))
    text = " ".join(f"{k}={v}" for k, v in arguments.items())
    integers = [abs(int(n)) for n in NUMBER.findall(text) if n.lstrip("-").isdigit()]
    return (sum(integers), len(text))


def example_text(record: dict | None) -> str | None:
    """The example as one line: ``name=value, ...`` and the seed or blob that replays it."""
    if not record:
        return None
    parts = [f"{k}={v}" for k, v in (record.get("arguments") or {}).items()]
    if record.get("seed") is not None:
        parts.append(f"(--hypothesis-seed={record['seed']})")
    if record.get("reproduce_failure"):
        parts.append(f"({record['reproduce_failure']})")
    return ", ".join(parts) or None


def violation_text(violation: dict | None) -> str | None:
    if not violation:
        return None

    def number(key):
        value = violation.get(key)
        return "a NaN or inf mismatch" if value is None else f"{value:.3g}"

    return (
        f"largest violation at index {tuple(violation.get('index') or ())}: got {violation.get('got')!r}, "
        f"expected {violation.get('expected')!r}, abs {number('abs_error')}, rel {number('rel_error')}, "
        f"allowed {number('allowed')}"
    )


def legacy_message(text: str | None) -> str | None:
    """A version-2 report's ``message`` was pytest's whole traceback (the suite's source among it):
    only its ``E`` lines up to Hypothesis's example, the exception type's prefix dropped."""
    if not text or "\nE " not in f"\n{text}":
        return text
    lines = []
    for line in text.splitlines():
        if not line.startswith("E "):
            continue
        line = line[1:].strip()
        if line.startswith(("Falsifying", "Failing test case", "Draw ", "Explanation:", "You can reproduce")):
            break
        lines.append(line if lines else re.sub(r"^[\w.]*(ConformanceError|Error|Exception): ", "", line))
    return "\n".join(lines) or None


def lines(failure: dict, *, message: str | None = None) -> list[str]:
    """A record as the terminal and every report show it: the verdict line first, then the
    example, the rest of the verdict (the violation's details), the rerun."""
    text = failure.get("message") or legacy_message(message) or failure.get("error") or ""
    verdict, *details = text.splitlines() or [""]
    out = [verdict] if verdict else []
    out += [f"  {frame}" for frame in failure.get("frames") or ()]
    shown = example_text(failure.get("example"))
    if shown:
        out.append(f"  example: {shown}")
    out += [f"  {line.strip()}" for line in details if line.strip()]
    if not details and violation_text(failure.get("largest_violation")):
        out.append(f"  {violation_text(failure['largest_violation'])}")
    if failure.get("rerun"):
        out.append(f"  rerun: {failure['rerun']}")
    return out

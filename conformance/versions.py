"""Version conditions of expectations entries (spec/devices.md, DEV-WHEN): ``when = "cann < 8.5"``,
``"torch_npu >= 2.6 and cann < 8.5"``, judged against the run's product tuple (DEV-PRODUCT).

Versions compare part by part (``.``-separated, a ``+local`` suffix dropped): a number is a final
release; ``RCn``/``rcn`` a release candidate and ``Tn`` a test build of the release it precedes
(CANN's forms, as torch_npu's own comparison ranks them), ``aN``/``bN``/``devN`` pre-releases,
``postN`` after it. A missing part is 0: 8.5 is 8.5.0, so ``8.5.RC1 < 8.5`` holds.
"""

from __future__ import annotations

import re

COMPONENTS = ("cann", "driver", "cuda", "torch", "torch_npu", "python", "opconform")
OPERATORS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
_TERM = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|==|!=|<|>)\s*([0-9][0-9A-Za-z.+]*)\s*$")
_PART = re.compile(r"^(\d*)([A-Za-z]*)(\d*)$")
# Rank of a part's letters: a final number 3; after it "post" 4; before it RC 2, T 1, a/b 0, dev -1.
_RANK = {"": 3, "post": 4, "rc": 2, "t": 1, "a": 0, "alpha": 0, "b": 0, "beta": 0, "dev": -1}


class ConditionError(ValueError):
    """A ``when`` that is not COMPONENT OP VERSION [and ...]; the message says what is wrong."""


def key(version: str) -> tuple | None:
    """A version's comparable form, or None when it is not one (an absent component is "")."""
    parts: list[tuple[int, int]] = []
    if not version.strip()[:1].isdigit():
        return None
    for part in version.strip().split("+")[0].split("."):
        found = _PART.match(part)
        if not part or not found or found.group(2).lower() not in _RANK:
            return None
        number, letters, trailing = found.groups()
        if number and letters:  # "0a0", "0rc1": the release, then its pre-/post-release
            parts += [(3, int(number)), (_RANK[letters.lower()], int(trailing or 0))]
        elif letters:
            parts.append((_RANK[letters.lower()], int(trailing or 0)))
        else:
            parts.append((3, int(number)))
    return tuple(parts) if parts else None


def _padded(a: tuple, b: tuple) -> tuple[tuple, tuple]:
    width = max(len(a), len(b))
    return a + ((3, 0),) * (width - len(a)), b + ((3, 0),) * (width - len(b))


def parse(condition: str) -> list[tuple[str, str, str]]:
    """``condition``'s terms (component, operator, version); raises ConditionError."""
    if not isinstance(condition, str) or not condition.strip():
        raise ConditionError("expected a condition like 'cann < 8.5' (COMPONENT OP VERSION [and ...])")
    terms = []
    for text in re.split(r"\s+and\s+", condition.strip()):
        found = _TERM.match(text)
        if not found:
            raise ConditionError(f"{text.strip()!r} is not COMPONENT OP VERSION (OP: {' '.join(OPERATORS)})")
        component, operator, version = found.groups()
        if component not in COMPONENTS:
            raise ConditionError(f"unknown component {component!r}; expected one of {list(COMPONENTS)}")
        if key(version) is None:
            raise ConditionError(f"{version!r} is not a version (like 8.5, 8.0.RC3, 2.6.0)")
        terms.append((component, operator, version))
    return terms


def holds(condition: str, product: dict) -> tuple[bool, str]:
    """Whether ``condition`` holds for ``product``, and the components it read (``cann 8.0.RC3``).
    A component the product lacks (no CANN on a CUDA host) or cannot compare makes it false."""
    seen, result = [], True
    for component, operator, version in parse(condition):
        value = product.get(component) or ""
        seen.append(f"{component} {value or 'absent'}")
        have = key(value)
        if have is None:
            result = False
            continue
        result &= OPERATORS[operator](*_padded(have, key(version)))
    return result, ", ".join(seen)

"""Range rules: where each family's draws must reach (spec/README.md, Ranges), as data beside its
strategies, one module per family (``RULES``), checked by tests/test_argument_coverage.py.

A ``Measure`` reads one number or name from an op call's arguments (a size, an offset from a
threshold, a gap in low-precision ulps, the form of a config); the recording backend
(tests/recording_backend.py) records every measure of every call the suite makes, and ``unmet``
reads that record against the rules. A ``Rule`` asks one thing of a measure's recorded values:

1. ``past``: some value above the largest tile or partition size at which the field's kernels
   switch (the family spec's "Ranges" section names the size and its source); ``odd``: some odd
   value above 1; ``has``: each of the non-powers of two real models use;
2. ``around``: a threshold a clause names drawn at T - 1, T and T + 1 (measured as an offset
   from T, so ``has`` -1, 0 and 1);
4. ``below``: some near-tie closer than one bfloat16 / float16 ulp, where a clause says "in
   float32 or better", without another feature (a bias) making the gap;
5. ``has`` of config forms: keys given without the switch that activates them, switches given
   without their keys.

(Rule 3 of the list, no output dtype, shape or device discarded before a comparison, is a property
of the checks, not of the draws: tests/test_argument_coverage.py reads conformance/checks.py.)
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

FAMILIES = (
    "activations",
    "norms",
    "masks",
    "attention",
    "serving",
    "kv_cache",
    "rope",
    "moe",
    "scheduler",
    "quant",
)
NEEDS = ("past", "odd", "has", "below")


@dataclass(frozen=True)
class Measure:
    """``of(arguments)`` for one call of ``op`` (its protocol names -> values): a number or name,
    several (a list, tuple or set: each recorded), or None (not measured on this call)."""

    op: str
    name: str
    of: Callable[[dict], object]

    def values(self, arguments: dict) -> list:
        value = self.of(arguments)
        if value is None:
            return []
        return [v for v in (value if isinstance(value, list | tuple | set | frozenset) else [value])
                if v is not None]  # fmt: skip


@dataclass(frozen=True)
class Rule:
    measure: Measure
    need: str  # one of NEEDS
    values: tuple
    kind: int  # which rule of the module docstring: 1, 2, 4 or 5
    why: str  # the size or threshold and where it comes from, briefly (the spec says it in full)

    def met(self, seen: Iterable) -> bool:
        seen = set(seen)
        numbers = [v for v in seen if isinstance(v, int | float) and not isinstance(v, bool)]
        if self.need == "past":
            return any(v > self.values[0] for v in numbers)
        if self.need == "odd":
            return any(isinstance(v, int) and v > 1 and v % 2 for v in numbers)
        if self.need == "below":
            return any(math.isfinite(v) and v < self.values[0] for v in numbers)
        return set(self.values) <= seen

    def describe(self) -> str:
        m = self.measure
        if self.need == "odd":
            want = "an odd value > 1"
        elif self.need == "has":
            want = f"each of {list(self.values)}"
        else:
            want = f"some value {'>' if self.need == 'past' else '<'} {self.values[0]}"
        return f"{m.op} {m.name}: {want} (rule {self.kind}: {self.why})"


def past(measure: Measure, size: int, why: str) -> Rule:
    return Rule(measure, "past", (size,), 1, why)


def odd(measure: Measure, why: str = "odd sizes: a vectorised or paired kernel's tail") -> Rule:
    return Rule(measure, "odd", (), 1, why)


def has(measure: Measure, *values, why: str, kind: int = 1) -> Rule:
    return Rule(measure, "has", tuple(values), kind, why)


def around(measure: Measure, why: str) -> Rule:
    """A threshold T drawn at T - 1, T and T + 1; ``measure`` gives the offset from T."""
    return Rule(measure, "has", (-1, 0, 1), 2, why)


def below(measure: Measure, bound: float, why: str) -> Rule:
    return Rule(measure, "below", (bound,), 4, why)


def config_forms(measure: Measure, *forms: str, why: str) -> Rule:
    return Rule(measure, "has", tuple(forms), 5, why)


# --- measures shared by the families ----------------------------------------------------------


def dim(argument: str, axis: int) -> Callable[[dict], int | None]:
    """The size of ``argument``'s dim ``axis`` (None when it is not a tensor of that rank)."""

    def of(arguments: dict):
        t = arguments.get(argument)
        shape = getattr(t, "shape", None)
        if shape is None or not -len(shape) <= axis < len(shape):
            return None
        return int(shape[axis])

    return of


def offsets(values: Iterable[int], threshold: int, reach: int = 1) -> list[int]:
    """The offsets ``v - threshold`` within ``reach`` of it (a threshold's T - 1, T, T + 1)."""
    return sorted({v - threshold for v in values if abs(v - threshold) <= reach})


def all_rules() -> list[Rule]:
    """Every family's rules (``conformance.strategies.ranges.<family>.RULES``)."""
    return [r for f in FAMILIES for r in importlib.import_module(f"{__name__}.{f}").RULES]


def measures_by_op(rules: Iterable[Rule]) -> dict[str, dict[str, Measure]]:
    """op -> measure name -> measure; two rules naming one measure share its object."""
    found: dict[str, dict[str, Measure]] = {}
    for rule in rules:
        m = rule.measure
        known = found.setdefault(m.op, {}).setdefault(m.name, m)
        if known is not m:
            raise ValueError(f"two measures named {m.op} {m.name!r}: give the rules one object")
    return found


def unmet(record: dict, rules: Iterable[Rule]) -> list[Rule]:
    """The rules whose measure's recorded values (``record[op][measure name]``) miss them."""
    return [r for r in rules if not r.met(record.get(r.measure.op, {}).get(r.measure.name, ()))]

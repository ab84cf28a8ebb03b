"""The run order of the suite's cases, derived from the clause graph in spec/ (spec/README.md,
"Run order"): the properties that pin a mechanism before their echoes, bad input last.

A property's rank comes from the clauses it names with ``@pytest.mark.clause``:

0. it names a clause that refines another (``*Refines:* ID`` under the clause heading): its
   failure pins one mechanism of a broader clause (ACT-GEGLU-MODES refines ACT-GEGLU, so a mode
   bug is reported as the mode bug, not as ACT-GEGLU's tolerance noise);
1. any other clause (the broad clauses, where the same bug shows again);
2. it names only error-case clauses (IDs ending in ``-ERRORS``: bad input is checked last).

The suite's items are sorted stably by rank, so within a rank (and within a backend) the
collection order stays; items of other tests keep their places. The sort runs in every process
that collects (each xdist worker sorts the same way, so the workers agree on the order).
"""

from __future__ import annotations

PINNING, ORDINARY, ERRORS = 0, 1, 2
ERRORS_SUFFIX = "-ERRORS"


def rank(clause_ids, clauses: dict) -> int:
    """The rank of a property naming ``clause_ids`` (spec_index.Clause by ID in ``clauses``)."""
    ids = [c for c in clause_ids if c in clauses]
    if any(clauses[c].refines for c in ids):
        return PINNING
    if ids and all(c.endswith(ERRORS_SUFFIX) for c in ids):
        return ERRORS
    return ORDINARY


def item_clauses(item) -> list[str]:
    return [c for mark in item.iter_markers("clause") for c in mark.args]


def order(items: list, clauses: dict, is_suite_item) -> None:
    """Sort, in place, the items for which ``is_suite_item(item)`` holds by rank (stable); every
    other item keeps its position."""
    slots = [i for i, item in enumerate(items) if is_suite_item(item)]
    ranked = sorted((items[i] for i in slots), key=lambda item: rank(item_clauses(item), clauses))
    for slot, item in zip(slots, ranked, strict=True):
        items[slot] = item

"""The run order of the suite's cases and of a report's failures, derived from the clause graph and
the levels in spec/ (spec/README.md, "Run order"): the real bug first.

A property's rank comes from the clauses it names with ``@pytest.mark.clause`` (a failure's, from
the clause it failed under):

0. a MUST clause that refines another (``*Refines:* ID``), judged against the oracle: its failure
   pins one mechanism of a broader clause (ACT-GEGLU-MODES refines ACT-GEGLU, so a mode bug is
   reported as the mode bug, not as ACT-GEGLU's tolerance noise);
1. any other MUST clause judged against the oracle (the broad clauses, where the same bug shows
   again);
2. a MUST clause that compares the backend with itself (metamorphic) or decides ties: its failure
   is real, but says less about where the bug is;
3. only SHOULD clauses (bad input, forms the field never passes): last.

The suite's items are sorted stably by rank, so within a rank (and within a backend) the
collection order stays; items of other tests keep their places. The sort runs in every process
that collects (each xdist worker sorts the same way, so the workers agree on the order).
"""

from __future__ import annotations

from conformance.spec_index import DIRECT, MUST

PINNING, ORDINARY, INDIRECT, SHOULD_ONLY = 0, 1, 2, 3


def _clause_rank(clause) -> int:
    if clause.level != MUST:
        return SHOULD_ONLY
    if clause.kind != DIRECT:
        return INDIRECT
    return PINNING if clause.refines else ORDINARY


def rank(clause_ids, clauses: dict) -> int:
    """The rank of a property naming ``clause_ids`` (spec_index.Clause by ID in ``clauses``): its
    best clause's. IDs the spec does not know rank as ordinary clauses."""
    ranks = [_clause_rank(clauses[c]) for c in clause_ids if c in clauses]
    return min(ranks) if ranks else ORDINARY


def item_clauses(item) -> list[str]:
    return [c for mark in item.iter_markers("clause") for c in mark.args]


def order(items: list, clauses: dict, is_suite_item) -> None:
    """Sort, in place, the items for which ``is_suite_item(item)`` holds by rank (stable); every
    other item keeps its position."""
    slots = [i for i, item in enumerate(items) if is_suite_item(item)]
    ranked = sorted((items[i] for i in slots), key=lambda item: rank(item_clauses(item), clauses))
    for slot, item in zip(slots, ranked, strict=True):
        items[slot] = item

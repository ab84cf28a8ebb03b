"""``--fold-cards`` (spec/devices.md, DEV-FOLD): a backend's columns on several cards of one type
(``native@npu:0`` ... ``native@npu:7``) become one column when the cards agree, named by their
indices (``native@npu:0,1,2,4,5,6,7``); a card whose cell state differs on some clause from the
state most of the others have keeps its own column and is the report's headline (a faulty card
corrupts data silently: this is how it shows).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from opconform import report as rep


def _card(result: dict) -> tuple[str, int] | None:
    kind, _, index = (result.get("device") or "").partition(":")
    return (kind, int(index)) if index.isdigit() else None


def _group(result: dict, card: tuple[str, int]) -> tuple:
    return (result.get("backend"), card[0], result.get("product"), result.get("model"))


def disagreeing(document: dict) -> dict[tuple, tuple[list[int], dict[int, list[str]]]]:
    """(backend, type, product, model) of two or more cards -> (its cards, card -> the clauses where
    that card's state differs from the most common state of the group's cards there; every card of
    a clause without a strict majority)."""
    states: dict[tuple, dict[str, dict[int, set[str]]]] = defaultdict(lambda: defaultdict(dict))
    for result in document["results"]:
        card = _card(result)
        for clause in (result.get("clauses") or [rep.NO_CLAUSE]) if card else []:
            states[_group(result, card)][clause].setdefault(card[1], set()).add(rep.case_state(result))
    found = {}
    for group, rows in states.items():
        cards = sorted({c for row in rows.values() for c in row})
        odd: dict[int, list[str]] = {}
        for clause, by_card in rows.items():
            cell = {c: next(s for s in rep.STATES if s in got) for c, got in by_card.items()}
            common, n = Counter(cell.values()).most_common(1)[0]
            for c, state in cell.items():
                if len(cell) > 1 and (n * 2 <= len(cell) or state != common):
                    odd.setdefault(c, []).append(clause)
        if len(cards) > 1:
            found[group] = (cards, odd)
    return found


def fold(document: dict) -> dict:
    """The document with agreeing cards' results on one folded device, and its ``headline``."""
    groups = disagreeing(document)
    headline = [
        f"card {kind}:{card} disagrees with the other {len(cards) - 1} {kind} card(s) of {backend} "
        f"on {', '.join(sorted(clauses))}: a faulty card, or a failure only its cases drew"
        for (backend, kind, _product, _model), (cards, odd) in groups.items()
        for card, clauses in sorted(odd.items())
    ]
    folded = []
    for result in document["results"]:
        card = _card(result)
        cards, odd = groups.get(_group(result, card), ([], {})) if card else ([], {})
        if cards and card[1] not in odd:
            agreeing = ",".join(str(c) for c in cards if c not in odd)
            result = {**result, "device": f"{card[0]}:{agreeing}"}
        folded.append(result)
    return {**document, "results": folded, "headline": headline}

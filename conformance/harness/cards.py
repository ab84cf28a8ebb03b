"""One xdist worker per card (spec/devices.md, DEV-CARDS): ``--device npu:0,1`` or a bare ``npu``
(every visible card) chooses cards; the controller gives worker i card i modulo their count, in the
runtime's visibility variable set in the worker's environment when xdist starts it (so before
torch or torch_npu initialise there), and ``-n auto`` starts one worker per card. A case records
the card its process ran on (``npu:3``, an index into the caller's visible list) and the document
the physical id that index named (``meta["cards"]``).

The plugin's ``pytest_plugins`` loads it (``pytest_xdist_auto_num_workers`` runs before
``pytest_configure``); its xdist hooks are optional, so a run without xdist loads it too.
"""

from __future__ import annotations

import os

import pytest

from conformance import devices
from conformance.harness.activation import state

WORKER_CARDS = "opconform_cards"  # workerinput: "npu:3,cuda:1", the worker's cards
WORKER_PINS = "opconform_pins"  # workeroutput: {"npu:3": "7"}, what its visibility variables held
CARDS_ENV = "OPCONFORM_WORKER_CARDS"  # carried in the worker's xdist spec to its workerinput


def chosen(values: list[str]) -> dict[str, list[int]]:
    """Type -> the card indices ``--device`` VALUES choose (raises ``devices.DeviceError``)."""
    picked: dict[str, list[int]] = {}
    for value in values:
        kind, indices = devices.parse(value)
        if kind in devices.INDEXED_TYPES:
            known = picked.setdefault(kind, [])
            known += [i for i in devices.cards(kind, indices) if i not in known]
    return picked


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own (the CPU count)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` with cards: one worker per card (the most cards of one type)."""
    try:
        picked = chosen(config.getoption("device") or [])
    except devices.DeviceError:
        return None  # activate reports it as the one usage line
    return max((len(i) for i in picked.values()), default=0) or None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs):
    """Each worker's spec gains its visibility variables: execnet sets them before xdist's worker
    code (and so torch) is imported there. A restarted worker reuses its spec, so its card."""
    run = state(config)
    if run is None or not run.cards:
        return
    import execnet

    run.untested = untested(run.cards, len(specs))
    for i, assignment in enumerate(devices.assign(len(specs), run.cards)):
        env = {**devices.pin_environment(assignment), CARDS_ENV: labels(assignment)}
        pinned = execnet.XSpec(str(specs[i]) + "".join(f"//env:{k}={v}" for k, v in env.items()))
        pinned.id = specs[i].id  # its worker keeps its name (gw0...), already allocated
        specs[i] = pinned


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    cards = node.gateway.spec.env.get(CARDS_ENV)
    if cards:
        node.workerinput[WORKER_CARDS] = cards


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    run = state(node.config)
    if run is not None:
        run.pins.update(getattr(node, "workeroutput", {}).get(WORKER_PINS) or {})


def untested(picked: dict[str, list[int]], workers: int) -> list[str]:
    """Warnings for the chosen cards no worker runs on (fewer workers than cards)."""
    return [
        f"{len(idx)} {kind} cards chosen, {workers} worker(s): "
        + ", ".join(devices.card_label(kind, i) for i in idx[workers:])
        + f" not tested (-n {len(idx)} or -n auto)"
        for kind, idx in picked.items()
        if len(idx) > workers
    ]


def activate(config, run) -> None:
    """The run's cards, this process's card, the physical ids, the cards left untested."""
    run.cards = {} if hasattr(config, "workerinput") else checked(config)  # a worker sees its card only
    run.card = this_process(config, run.cards)
    run.pins = pins(config, run.card)
    run.untested = [] if distributing(config) else untested(run.cards, 1)
    run.case_devices = torch_devices(config, run)


def checked(config) -> dict[str, list[int]]:
    """``chosen`` for ``--device`` (default: every present type), a mistake one usage error."""
    try:
        return chosen(config.getoption("device") or devices.present_devices())
    except devices.DeviceError as exc:
        raise pytest.UsageError(str(exc)) from exc


def labels(assignment: dict[str, int]) -> str:
    return ",".join(devices.card_label(kind, index) for kind, index in assignment.items())


def this_process(config, picked: dict[str, list[int]]) -> dict[str, str]:
    """Type -> the card label this process runs on: a worker's from its workerinput, one process's
    the first card chosen of each type (it cannot re-pin itself: the runtime may have started)."""
    given = getattr(config, "workerinput", {}).get(WORKER_CARDS)
    if given:
        return {label.partition(":")[0]: label for label in given.split(",")}
    return {kind: devices.card_label(kind, idx[0]) for kind, idx in picked.items() if idx}


def pins(config, card: dict[str, str]) -> dict[str, str]:
    """Label -> the physical id its visibility variable held in this process (sent to the controller
    from a worker): the record of which card a verdict is about."""
    found: dict[str, str] = {}
    if distributing(config):  # the controller runs no case: its workers send theirs
        return found
    for kind, label in card.items():
        variable = os.environ.get(devices.VISIBLE_ENV[kind])
        if hasattr(config, "workerinput"):
            found[label] = variable or "?"
        else:  # one process: the label's index names a position of its own visible list
            visible = devices.visible_ids(kind)
            index = int(label.partition(":")[2])
            found[label] = visible[index] if index < len(visible) else "?"
    if hasattr(config, "workeroutput"):
        config.workeroutput[WORKER_PINS] = found
    return found


def distributing(config) -> bool:
    """Whether this is an xdist controller (xdist's own test: a ``--dist`` mode and ``--tx`` specs)."""
    return (
        not hasattr(config, "workerinput")
        and config.getoption("dist", "no") != "no"
        and bool(config.getoption("tx", None))
    )


def torch_devices(config, run) -> list:
    """The run's devices as the cases get them: a worker sees only its card (index 0 of its
    visible list, so the bare type), one process the chosen card by index."""
    single = not hasattr(config, "workerinput")
    return [
        devices.as_device(run.card[kind] if single and kind in run.card else kind) for kind in run.devices
    ]

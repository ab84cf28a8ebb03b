"""Repository conftest: load the opconform plugin when the package is not installed, and apply
the suite's warning filters to the self-tests as well.

An installed opconform registers ``conformance.plugin`` through the ``pytest11`` entry point;
loading it here as well would register it twice.
"""

from importlib import metadata

import pytest

from conformance.plugin import WARNING_FILTERS

if not any(ep.value == "conformance.plugin" for ep in metadata.entry_points(group="pytest11")):
    pytest_plugins = ["conformance.plugin"]


def pytest_configure(config):
    """The plugin adds WARNING_FILTERS once it activates; tests/ may import torch without it."""
    for line in WARNING_FILTERS:
        config.addinivalue_line("filterwarnings", line)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`pytest -n auto` here schedules by work stealing: a few tests take 10-15 s (mutant batches,
    subprocess runs) and xdist's default chunks left one of two workers idle ~25 s at the end."""
    if config.getoption("dist") == "load":
        from xdist.scheduler import WorkStealingScheduling

        return WorkStealingScheduling(config, log)
    return None

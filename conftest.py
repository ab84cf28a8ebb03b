"""Repository conftest: load the opconform plugin when the package is not installed, and apply
the suite's warning filters to the self-tests as well.

An installed opconform registers ``conformance.harness.plugin`` through the ``pytest11`` entry point;
loading it here as well would register it twice.

The repository's own runs use one intra-op thread per process (unless OMP_NUM_THREADS says
otherwise): the self-tests' tensors are small, ``pytest -n auto`` already gives each core a
worker, and two OpenMP threads per worker (and per subprocess run) on those cores spent about
half of the attention and serving properties' CPU time waiting for each other. A user's
``opconform run`` does not read this file.
"""

import os
import sys
from importlib import metadata

import pytest

from conformance.harness.plugin import WARNING_FILTERS

if not any(ep.value == "conformance.harness.plugin" for ep in metadata.entry_points(group="pytest11")):
    pytest_plugins = ["conformance.harness.plugin"]


os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported; subprocesses inherit it
# The self-tests start about 55 Python processes that import (and pytest assertion-rewrites) the same
# modules; where an image sets PYTHONDONTWRITEBYTECODE each compiled them again (0.2-0.4 CPU-s a
# process, measured). The repository's own runs write the bytecode caches (__pycache__, gitignored).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# anyio's pytest plugin imports trio where the image has it installed: 0.24 CPU-s in each of the ~130
# pytest processes (workers, controllers, subprocess runs) a self-test run starts, for a plugin no test
# here uses. pyproject's addopts blocks it in this process and its workers, this in the subprocesses.
os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"), "-p no:anyio"]))


def pytest_configure(config):
    """The plugin adds WARNING_FILTERS once it activates; tests/ may import torch without it."""
    if "torch" in sys.modules:  # imported before this file (by another plugin): set it there too
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
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

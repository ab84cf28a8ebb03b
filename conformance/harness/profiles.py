"""The suite's Hypothesis profiles, registered under ``opconform-*`` names and loaded only for the suite.

Registering a profile changes nothing for other suites in the environment; loading one would, so
the plugin loads ``opconform-ci`` (when CI is set) or ``opconform-dev`` only when it is active and
no ``--hypothesis-profile`` was given. The short names (``ci``, ``dev``...) are accepted on the
opconform side: ``opconform run --profile ci``, and ``--hypothesis-profile=ci`` in a run of the
suite (``for_suite``); in any other run ``ci`` stays whatever Hypothesis or the project made it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.errors import InvalidArgument

PREFIX = "opconform-"
SHORT_NAMES = ("dev", "ci", "thorough", "debug", "ci-noshrink", "ci-shared")

# derandomize makes a serial run and `-n auto` draw identical examples. The parent is explicit:
# without it a profile inherits whatever is loaded at import (Hypothesis's own "ci" when CI is set).
_BASE = dict(
    parent=settings.get_profile("default"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(f"{PREFIX}dev", max_examples=30, print_blob=True, **_BASE)
settings.register_profile(
    f"{PREFIX}ci", max_examples=30, derandomize=True, print_blob=True, database=None, **_BASE
)
settings.register_profile(f"{PREFIX}thorough", max_examples=300, print_blob=True, **_BASE)
settings.register_profile(
    f"{PREFIX}debug", max_examples=10, verbosity=Verbosity.verbose, print_blob=True, **_BASE
)
# "ci" without the shrink phase: the same examples, so the same verdicts, minus the minimal
# example. For runs that only need to know whether (and by which clause) a backend fails, such
# as the mutant kill matrix.
settings.register_profile(
    f"{PREFIX}ci-noshrink",
    parent=settings.get_profile(f"{PREFIX}ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)


def _register_shared_profile() -> None:
    """ "opconform-ci-shared": the ci settings, randomized, replaying examples other CI jobs found.

    Enabled by OPCONFORM_SHARED_DB=OWNER/REPO: the local example database is multiplexed with a
    read-only view of the GitHub artifact ``hypothesis-example-db`` (needs GITHUB_TOKEN), so a
    counterexample found on one device's runner is replayed on the others (docs/ci.md).
    """
    target = os.environ.get("OPCONFORM_SHARED_DB")
    if not target:
        return
    from hypothesis.database import (
        DirectoryBasedExampleDatabase,
        GitHubArtifactDatabase,
        MultiplexedDatabase,
        ReadOnlyDatabase,
    )

    owner, _, repo = target.partition("/")
    if not owner or not repo:
        raise ValueError(f"OPCONFORM_SHARED_DB must look like OWNER/REPO, got {target!r}")
    shared = ReadOnlyDatabase(GitHubArtifactDatabase(owner, repo))
    local = DirectoryBasedExampleDatabase(".hypothesis/examples")
    settings.register_profile(
        f"{PREFIX}ci-shared", parent=settings.get_profile(f"{PREFIX}ci"), derandomize=False,
        database=MultiplexedDatabase(local, shared),
    )  # fmt: skip


_register_shared_profile()


def registered(name: str) -> bool:
    try:
        settings.get_profile(name)
    except InvalidArgument:
        return False
    return True


def for_suite(name: str | None) -> str:
    """The profile a run of the suite loads for ``--hypothesis-profile=name``: the suite's default
    when none is given, ``opconform-NAME`` for a short name (Hypothesis itself registers a ``ci``)."""
    if name is None:
        return f"{PREFIX}ci" if os.environ.get("CI") else f"{PREFIX}dev"
    return PREFIX + name if name in SHORT_NAMES and registered(PREFIX + name) else name


def with_verbosity(name: str, verbosity: str | None) -> str:
    """``name``, or a profile derived from it with ``--hypothesis-verbosity``'s value, registered the
    way Hypothesis's plugin does (``NAME-with-VERBOSITY-verbosity``): loading the suite's profile
    after Hypothesis applied the option would otherwise drop it."""
    if not verbosity or settings.get_profile(name).verbosity.name == verbosity:
        return name
    derived = f"{name}-with-{verbosity}-verbosity"
    settings.register_profile(derived, parent=settings.get_profile(name), verbosity=Verbosity[verbosity])
    return derived


def share_of_examples(share: float) -> settings:
    """Settings for a property that draws ``share`` of the loaded profile's examples (at least 5):
    applied at collection, under the suite's profile (``SuiteProfile``), so "thorough" still
    draws ``share`` of its 300. For properties whose examples are costly and alike (the NaN
    properties: one NaN site per example, the site the only draw that matters)."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    return settings(max_examples=max(5, round(settings.default.max_examples * share)))


def should_examples(share: float = 1 / 3) -> settings:
    """Settings for a SHOULD property (spec/README.md, Levels): ``share`` of the loaded profile's
    examples (at least 5), unshrunk. Robustness the field does not promise takes less of a run
    (its views and combinations repeat computations the MUST properties check contiguous and in
    the forms models use), and a SHOULD failure is listed as one verdict line: its first failing
    example, replayable by its rerun line, is enough there."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    examples = max(5, round(settings.default.max_examples * share))
    return settings(max_examples=examples, phases=[Phase.explicit, Phase.reuse, Phase.generate])


# The built-in peers (backends.PEERS) draw this share of the profile's examples, except under
# "thorough": they stand in for the field's correct code, to show no clause fails it, and a demand the
# field does not meet (a convention) fails on most draws; "thorough" draws their full count.
PEER_SHARE = 1 / 3


@contextlib.contextmanager
def adjusted(test, *, unshrunk: bool, peer: bool, profile: str | None):
    """Run ``test`` (a Hypothesis property) with its settings adjusted for one case, its own restored
    after: ``unshrunk`` drops the shrink phase (a failure a manifest declares needs no smallest
    example: its entry says what it is, and shrinking it cost seconds a case); ``peer`` draws
    ``PEER_SHARE`` of its examples (at least 5) unless ``profile`` is thorough. Hypothesis reads a
    test's settings when it is called, from the attribute its ``@settings`` sets."""
    current = getattr(test, "_hypothesis_internal_use_settings", None)
    peer = peer and profile != f"{PREFIX}thorough"
    if current is None or not (unshrunk or peer):
        yield
        return
    changes = {}
    if unshrunk:
        changes["phases"] = [p for p in current.phases if p != Phase.shrink]
    if peer:
        changes["max_examples"] = max(5, round(current.max_examples * PEER_SHARE))
    test._hypothesis_internal_use_settings = settings(current, **changes)
    try:
        yield
    finally:
        test._hypothesis_internal_use_settings = current


def known() -> list[str]:
    """The suite's registered profiles (Hypothesis has no public list of every profile)."""
    return [PREFIX + n for n in SHORT_NAMES if registered(PREFIX + n)]


class SuiteProfile:
    """Registered as a plugin when the suite activates: the suite's profile is loaded while one of
    its modules is collected (so the module's ``@settings`` inherit it) and while one of its tests
    runs, and the profile loaded before is restored after each, so a user's tests collected or run
    in the same session keep their own profile.

    ``@given`` and ``@settings`` bind the profile loaded when a module is executed. A suite module
    imported before its collection (by a user's test module or conftest, or by an earlier
    ``pytest.main`` in the process) was bound to another profile: Hypothesis's default of 100
    examples instead of the ci profile's 30, measured on every serving property when a self-test
    imported conformance.test_padding. Such a module is executed again under the suite's profile
    when it is collected (``_rebind``); one this run imported under it is kept."""

    def __init__(self, name: str, is_suite_path):
        self.name = name
        self.is_suite_path = is_suite_path
        self.bound: set[str] = set()  # suite modules executed under this run's profile

    @contextlib.contextmanager
    def _loaded(self):
        previous = settings.get_current_profile_name()
        settings.load_profile(self.name)
        try:
            yield
        finally:
            settings.load_profile(previous)

    def _scope(self, path):
        return self._loaded() if self.is_suite_path(path) else contextlib.nullcontext()

    def _rebind(self, path: Path) -> None:
        """Execute the module at ``path`` again (the suite's profile loaded) when it was imported
        before this run collected it under that profile."""
        stem = path.stem  # the name's last part compared first: ~1,500 modules are loaded
        for name, module in list(sys.modules.items()):
            if name.rpartition(".")[2] == stem and name not in self.bound and _same_file(module, path):
                importlib.reload(module)
                self.bound.add(name)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector):
        if not (isinstance(collector, pytest.Module) and self.is_suite_path(collector.path)):
            return (yield)
        with self._loaded():
            before = set(sys.modules)
            self._rebind(collector.path)
            try:
                return (yield)
            finally:  # the module and the suite modules it imported ran under the profile
                files = {name: _file(sys.modules[name]) for name in set(sys.modules) - before}
                self.bound |= {name for name, file in files.items() if file and self.is_suite_path(file)}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        with self._scope(item.path):
            return (yield)


def _file(module) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file) if file else None


def _same_file(module, path: Path) -> bool:
    file = _file(module)
    return file is not None and file.resolve() == Path(path).resolve()

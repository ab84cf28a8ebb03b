"""The per-case time limit: a case still running past it is stopped and recorded as ``timeout``.

Registered as a plugin when the suite activates. The limit is ``--opconform-timeout`` when given
(0: none; ``conformance.options.seconds`` rejects a negative, NaN or infinite value as a usage
error), else the suite's default for its profile (``DEFAULT_SECONDS``), for the suite's own
cases only: a user's tests collected in the same session, and a run under ``--pdb`` or the
``opconform-debug`` profile (someone at a prompt), get none. SIGALRM stops the case, so the limit
needs Unix and the main thread; elsewhere cases run unlimited. SIGALRM takes effect only when the
case's thread runs Python: a hang in native code is ended from outside the worker, in a
distributed run, by ``conformance.harness.watchdog``.
"""

from __future__ import annotations

import signal
import threading

import pytest

from conformance.harness import activation, profiles, recorder

# Generous: the slowest case of the suite takes about 6 s on a 2-core CPU under opconform-ci;
# a hanging kernel must cost its case, not the run (a device-matrix job would never end).
DEFAULT_SECONDS = 300.0
THOROUGH_SECONDS = 3000.0  # opconform-thorough draws 10x the examples
# SIGALRM's timer holds at most about 9.2e12 s (OverflowError past it): a longer limit, which no
# case reaches anyway, is set as this (about 31 years).
TIMER_MAX_SECONDS = 1e9


def case_time_limit(*, given: float | None, profile: str | None, suite_case: bool, debugging: bool):
    """The limit in seconds for one case, or None for none."""
    if given is not None:
        return given or None
    if not suite_case or debugging or profile == f"{profiles.PREFIX}debug":
        return None
    return THOROUGH_SECONDS if profile == f"{profiles.PREFIX}thorough" else DEFAULT_SECONDS


class TimeLimit:
    def __init__(self, config, profile: str | None):
        self.given = config.getoption("opconform_timeout")
        self.profile = profile
        self.debugging = bool(config.getoption("usepdb", False))

    def limit_of(self, item, *, suite_case: bool | None = None) -> float | None:
        """``item``'s limit in seconds (None: none); ``suite_case`` overrides whether it is the suite's."""
        if suite_case is None:
            suite_case = activation.is_suite_module(item.path)
        return case_time_limit(
            given=self.given, profile=self.profile, suite_case=suite_case, debugging=self.debugging
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        """Stop a case past its limit with ``recorder.CaseTimeout`` (a BaseException, so Hypothesis
        does not shrink it as a failing example)."""
        limit = self.limit_of(item)
        if (
            not limit
            or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()
        ):
            return (yield)

        def stop(signum, frame):
            __tracebackhide__ = True  # the timeout's record says the limit; this frame is the suite's
            raise recorder.CaseTimeout(f"the case ran past the per-case time limit of {limit:g} s")

        previous = signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, min(limit, TIMER_MAX_SECONDS))
        try:
            return (yield)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

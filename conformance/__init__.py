"""The conformance properties: Hypothesis tests that check every backend against the oracles.

Run them with ``pytest --pyargs conformance`` (or ``opconform run``); the pytest plugin in
``conformance.harness.plugin`` adds the backend and device options and is registered through the
``pytest11`` entry point.
"""

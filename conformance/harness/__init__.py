"""The pytest harness: the plugin and what only it uses at test time.

The properties (``conformance/test_*.py``) and what they and the ``opconform`` tool share
(checks, tolerances, strategies, expectations, the results schema) live one level up; this
subpackage is the machinery that runs them under pytest: options and selection
(``plugin``, ``selection``, ``activation``), profiles, run order and streamed verdicts
(``ordering``, ``stream``, ``failfast``), the per-case limits (``time_limit``, ``watchdog``,
``crash_record``), and the recording of each case (``recorder``, ``levels``,
``failure_capture``, ``model_profile``, ``exit_gc``).
"""

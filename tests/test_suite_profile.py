"""The suite's properties draw the suite profile's examples, even from a module that a user's test
module imported before the suite collected it (conformance.harness.profiles.SuiteProfile)."""

from __future__ import annotations

import os
import subprocess
import sys

from suite_runner import REPO

EARLY = """
import conformance.test_masks as early  # executed here, before the suite collects it


def test_the_early_import_holds_the_suite_profile():
    bound = early.test_encoder_mask_matches_oracle._hypothesis_internal_use_settings
    print("EXAMPLES", bound.max_examples, "DERANDOMIZE", bound.derandomize)
"""


def test_a_suite_module_imported_early_draws_the_suite_profile(tmp_path):
    """Imported at a user's module's import (Hypothesis's default profile loaded: 100 examples), the
    property is bound to the suite's ci profile (30, derandomized) once the suite collects it."""
    (tmp_path / "test_early.py").write_text(EARLY)
    env = {**os.environ, "CI": "1", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    command = [sys.executable, "-m", "pytest", "test_early.py", str(REPO / "conformance" / "test_masks.py"),
               "-p", "no:xdist", "-p", "no:cacheprovider", "-s", "-q", "--backend=native",
               "-k", "test_the_early_import_holds_the_suite_profile"]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "EXAMPLES 30 DERANDOMIZE True" in proc.stdout, proc.stdout[-3000:]

"""Version conditions (spec/devices.md, DEV-WHEN): ordering of the field's version forms, the
condition grammar, and a bad ``when`` refused when the manifest is read, naming file and line."""

from __future__ import annotations

import re

import pytest

from conformance import spec_index, versions
from conformance.expectations import ManifestError, applying, load_manifest


@pytest.mark.parametrize(
    "have, condition, holds",
    [
        ("8.0.RC3", "cann < 8.5", True),
        ("8.5.RC1", "cann < 8.5", True),  # a release candidate of 8.5 precedes it
        ("8.5.0", "cann < 8.5", False),
        ("8.2.T10", "cann < 8.2.RC1", True),  # a test build precedes the RCs (torch_npu's ranking)
        ("8.10.0", "cann > 8.9", True),  # parts are numbers, not text
        ("2.6.0+cpu", "torch >= 2.6", True),  # the local part is dropped
        ("2.6.0a0+git1", "torch >= 2.6", False),  # a pre-release precedes its release
        ("2.5.1.post3", "torch > 2.5.1", True),
        ("2.6.0", "torch == 2.6", True),
        ("2.6.0", "torch != 2.6.0", False),
        ("", "cann < 8.5", False),  # an absent component: the entry does not apply
        ("beta", "cann < 8.5", False),  # a value that is no version: neither
    ],
)
def test_conditions(have, condition, holds):
    component = condition.split()[0]
    assert versions.holds(condition, {component: have})[0] is holds


def test_terms_joined_by_and_all_hold():
    product = {"cann": "8.0.RC3", "torch_npu": "2.6.0"}
    assert versions.holds("cann < 8.5 and torch_npu >= 2.6", product) == (
        True,
        "cann 8.0.RC3, torch_npu 2.6.0",
    )
    assert versions.holds("cann < 8.5 and torch_npu >= 2.7", product)[0] is False


@pytest.mark.parametrize(
    "when, words",
    [
        ("cann <", "is not COMPONENT OP VERSION"),
        ("cann ~ 8.5", "is not COMPONENT OP VERSION"),
        ("cann < 8,5", "is not COMPONENT OP VERSION"),
        ("chip == 910B", "unknown component 'chip'"),
        ("", "expected a condition like 'cann < 8.5'"),
    ],
)
def test_a_bad_when_names_file_and_line(tmp_path, when, words):
    path = tmp_path / "npu.toml"
    path.write_text(f'[[expect]]\nclause = "NORM-RMS"\nreason = "intermittent"\nwhen = "{when}"\n')
    with pytest.raises(ManifestError, match=rf"npu\.toml:4: when {re.escape(repr(when))}: .*{words}"):
        load_manifest(path, known_clauses=spec_index.load_clauses())


def test_applying_reads_the_versions_only_when_a_condition_asks(tmp_path):
    path = tmp_path / "npu.toml"
    path.write_text('[[expect]]\nclause = "NORM-RMS"\nreason = "intermittent"\n')
    plain = load_manifest(path, known_clauses=spec_index.load_clauses())
    assert applying(plain, lambda: pytest.fail("read the versions")) == (plain, [])
    path.write_text(path.read_text() + 'when = "cann >= 8.5"\n')
    conditioned = load_manifest(path, known_clauses=spec_index.load_clauses())
    assert applying(conditioned, lambda: {"cann": "8.5.0"}) == (conditioned, [])
    kept, dropped = applying(conditioned, lambda: {"cann": "8.3.RC1"})
    assert kept == [] and dropped == [(conditioned[0], "when 'cann >= 8.5' is false here (cann 8.3.RC1)")]

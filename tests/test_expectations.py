"""Expectations manifests: parsing, clear errors with file and line, matching and verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance import spec_index
from conformance.expectations import ManifestError, judge, load_manifest, load_manifests

CLAUSES = spec_index.load_clauses()
GOOD = """\
backend = "npu"

[[expect]]
clause = "ACT-GEGLU"
device = "npu"
dtype = "bfloat16"
reason = "deviation"
bound = 2e-3

[[expect]]
test = "test_activations.py::test_npu_geglu_args*"
reason = "bug"
issue = "https://example.org/issues/7"
"""


def _load(tmp_path, text, name="npu.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_manifest(path, known_clauses=CLAUSES)


def test_good_manifest_loads_with_lines(tmp_path):
    """Entries keep their backend, fields and the line of their [[expect]] header."""
    deviation, bug = _load(tmp_path, GOOD)
    assert (deviation.backend, deviation.line, deviation.bound, deviation.dtype) == (
        "npu",
        3,
        2e-3,
        "bfloat16",
    )
    assert (bug.line, bug.reason, bug.issue) == (10, "bug", "https://example.org/issues/7")


@pytest.mark.parametrize(
    "bad, line, words",
    [
        ('reason = "deviation"', 7, "reason 'flaky' is not one of"),
        ('clause = "ACT-GEGLU"', 4, "unknown clause 'ACT-NOPE'"),
        ("bound = 2e-3", 3, "a deviation needs 'bound'"),
        ('dtype = "bfloat16"', 6, "dtype 'bf16' is not one of"),
        ('device = "npu"', 5, "device 'tpu' is not one of"),
    ],
)
def test_bad_entry_names_file_and_line(tmp_path, bad, line, words):
    """Unknown reason, unknown clause, missing bound, bad dtype/device: an error at FILE:LINE."""
    replacement = {
        'reason = "deviation"': 'reason = "flaky"',
        'clause = "ACT-GEGLU"': 'clause = "ACT-NOPE"',
        "bound = 2e-3": "",
        'dtype = "bfloat16"': 'dtype = "bf16"',
        'device = "npu"': 'device = "tpu"',
    }[bad]
    text = GOOD.replace(bad, replacement, 1)
    with pytest.raises(ManifestError, match=rf"npu\.toml:{line}: {words}"):
        _load(tmp_path, text)


@pytest.mark.parametrize("pattern", ["test_geglu*", "a b.py::x", "test_x.py", "test_x.py::"])
def test_malformed_pattern_is_an_error(tmp_path, pattern):
    """A test pattern must be FILE.py::TEST without spaces."""
    text = GOOD.replace('"test_activations.py::test_npu_geglu_args*"', f'"{pattern}"')
    with pytest.raises(ManifestError, match=r"npu\.toml:11: malformed test pattern"):
        _load(tmp_path, text)


@pytest.mark.parametrize(
    "pattern, nodeid, matches",
    [("test_x.py::test_y[acme-cpu]", "conformance/test_x.py::test_y[acme-cpu]", "yes"),
     ("test_x.py::test_y[acme-cpu]", "conformance/test_x.py::test_y[acme-cuda]", "no"),
     ("test_x.py::test_y[acme-cpu-*]", "test_x.py::test_y[acme-cpu-rms_norm]", "yes"),
     ("test_x.py::test_y[acme-?pu]", "test_x.py::test_y[acme-cpu]", "yes"),
     ("test_x.py::test_y[[]acme-cpu]", "test_x.py::test_y[acme-cpu]", "no"),
     ("test_x.py::t[1", "test_x.py::t[1", "yes")],
)  # fmt: skip
def test_brackets_in_a_pattern_are_the_cases_parameters(tmp_path, pattern, nodeid, matches):
    """`test_y[acme-cpu]` read its brackets as an fnmatch class (it matched no case) and fnmatch's
    escape `[[]` was refused as unbalanced: brackets are literal, `*` and `?` the wildcards."""
    text = GOOD.replace('"test_activations.py::test_npu_geglu_args*"', f'"{pattern}"')
    (_, entry) = _load(tmp_path, text)
    case = {"backend": "npu", "device": "cpu", "clauses": ["ACT-GEGLU"], "dtype": None}
    assert entry.matches(nodeid=nodeid, **case) == matches


def test_unknown_key_toml_error_and_missing_file(tmp_path):
    """Unknown keys, TOML syntax errors, a file that is not UTF-8 (was a UnicodeDecodeError naming
    no file) and missing paths are errors naming the file."""
    with pytest.raises(ManifestError, match=r"npu\.toml:13: unknown key 'isue'"):
        _load(tmp_path, GOOD.replace("issue =", "isue ="))
    with pytest.raises(ManifestError, match=r"npu\.toml: not valid TOML: .*line 1"):
        _load(tmp_path, "backend = \n")
    with pytest.raises(ManifestError, match="no such expectations file"):
        load_manifests([tmp_path / "missing.toml"], known_clauses=CLAUSES)
    path = tmp_path / "latin1.toml"
    path.write_bytes('backend = "native"\n# café\n'.encode("latin-1"))
    with pytest.raises(ManifestError, match=r"latin1\.toml:2: not UTF-8 \(byte 0xe9\)"):
        load_manifests([path], known_clauses=CLAUSES)
    with pytest.raises(ManifestError, match=r"npu\.toml:3: give exactly one of 'clause'"):
        _load(tmp_path, GOOD.replace('clause = "ACT-GEGLU"', ""))


def test_matching_and_verdicts(tmp_path):
    """Matching respects backend, device, clause and dtype; a deviation beyond its bound is not expected."""
    deviation, bug = _load(tmp_path, GOOD)
    case = dict(
        nodeid="x/test_activations.py::test_geglu_matches_oracle[npu-npu]", backend="npu", device="npu"
    )
    assert deviation.matches(**case, clauses=["ACT-GEGLU"], dtype="bfloat16") == "yes"
    assert deviation.matches(**case, clauses=["ACT-GEGLU"], dtype=None) == "maybe"
    assert deviation.matches(**case, clauses=["ACT-GEGLU"], dtype="float32") == "no"
    assert deviation.matches(**{**case, "backend": "native"}, clauses=["ACT-GEGLU"], dtype="bfloat16") == "no"
    assert bug.matches(**{**case, "nodeid": "test_activations.py::test_npu_geglu_args[npu-npu-tanh]"},
                       clauses=[], dtype=None) == "yes"  # fmt: skip
    assert judge([deviation], outcome="failed", largest_error=1e-3)[0] == "expected"
    assert judge([deviation], outcome="failed", largest_error=1e-2)[0] == "exceeds bound"
    assert judge([bug], outcome="passed", largest_error=None)[0] == "unexpected pass"


def test_shipped_manifests_are_valid(tmp_path):
    """The repository's expectations/ manifests and the example load cleanly."""
    directory = Path(__file__).resolve().parent.parent / "expectations"
    shipped = load_manifests([directory], known_clauses=CLAUSES)
    unsupported = [  # what the Ascend adapter cannot express (spec/ascend.md, CANN-FIA-V2)
        (backend, what, "unsupported")
        for backend in ("npu", "npu-emulated")
        for what in (
            "SERVE-HEAD-DIMS",
            "SERVE-SOFTCAP",
            "test_serving.py::test_sinks_with_softcap_match_oracle*",
        )
    ]
    assert sorted((e.backend, e.clause or e.test, e.reason) for e in shipped) == sorted([
        ("diffusers", "DPM-SDE3", "bug"),
        ("diffusers-wrapped", "DPM-SDE3", "bug"),
        ("npu-emulated", "SERVE-EVICT", "unsupported"),  # the emulator reads masked keys (CANN-FIA-PAGED)
        # torch's CPU SDPA zeros a NaN query row (spec/attention.md, ATTN-NAN's sources)
        ("transformers", "test_attention.py::test_*_nan_reaches_exactly_the_rows_that_see_it*", "bug"),
        *unsupported,
    ])  # fmt: skip
    example = _load(tmp_path, (directory / "example.toml.txt").read_text())
    assert sorted(e.reason for e in example) == ["bug", "deviation", "intermittent", "unsupported"]


def test_a_declared_failure_runs_unshrunk_and_the_property_keeps_its_settings():
    """profiles.adjusted: no shrink phase while a declared case runs, the property's settings after."""
    from hypothesis import Phase, given, settings
    from hypothesis import strategies as st

    from conformance.harness.profiles import adjusted

    seen = []

    @settings(max_examples=7, database=None)
    @given(st.integers())
    def prop(n):
        seen.append(prop._hypothesis_internal_use_settings.phases)

    before = prop._hypothesis_internal_use_settings
    with adjusted(prop, unshrunk=True, peer=False, profile="opconform-ci"):
        prop()
    assert Phase.shrink not in seen[-1] and prop._hypothesis_internal_use_settings is before
    with adjusted(prop, unshrunk=False, peer=False, profile="opconform-ci"):
        prop()
    assert Phase.shrink in seen[-1] and before.max_examples == 7


def test_a_builtin_peer_draws_its_share_except_under_thorough():
    """profiles.adjusted: a peer's case draws PEER_SHARE of the property's examples (at least 5), all
    of them under thorough; a user's backend named like a peer is not one."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from backends import load_backend_module
    from conformance.harness import selection
    from conformance.harness.profiles import PEER_SHARE, adjusted

    calls = []

    @settings(max_examples=30, database=None)
    @given(st.integers())
    def prop(n):
        calls.append(n)

    for profile, expected in (("opconform-ci", round(30 * PEER_SHARE)), ("opconform-thorough", 30)):
        calls.clear()
        with adjusted(prop, unshrunk=False, peer=True, profile=profile):
            prop()
        assert len(calls) == expected, (profile, len(calls))
    assert prop._hypothesis_internal_use_settings.max_examples == 30
    (peer,) = load_backend_module("backends.transformers_peer")

    class Impostor:
        name = "transformers"

        def unavailable(self, device):
            return None

    assert selection.is_peer(peer) and not selection.is_peer(Impostor()) and not selection.is_peer(None)

"""No op argument is held constant by every property that calls it (issue 18, item 16).

The whole suite runs once against ``recording`` (tests/recording_backend.py: the built-in ops,
recording every call), in the ci profile's derandomized examples (5 per property: the same
constant arguments as 10 and 30, measured), without the error-case properties (`*_errors`, the
float-mask rejection): a bad input is no variation of a valid argument (with them, seq_lens'
dtype and the mask's device counted as varied). For every op of ``backends.OPS`` and every argument
of its protocol signature, each aspect must take at least two distinct values across the suite:
a scalar's or option's value (being omitted counts as a value), a tensor's dtype and its layout
(contiguous or strided), and for an attention ``scale`` whether it is the conventional
1/sqrt(D) (a kernel ignoring the passed scale conformed while only that was drawn). An argument
always a tensor has no value aspect. ``HOLDOUTS`` lists the known exceptions, each with its
reason; the table must equal what the run finds, so a new constant argument fails, and so does
a holdout once fixed (remove its row).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from suite_runner import REPO, produced_once

from backends.protocols import OPS

# (op, argument, aspect) -> why it is constant today; "*"/"called": no built-in backend has the op.
_METADATA = "always contiguous: metadata, a mask or decode's one-token q, built fresh (no view drawn yet)"
HOLDOUTS: dict[tuple[str, str, str], str] = {
    ("flash_attention_window", "*", "called"): "no built-in backend implements it: nothing to record",
    **{
        (op, arg, "layout"): _METADATA
        for op, args in {
            "attention": ("allowed",),
            "prefill_attention": ("padding_mask",),
            "decode_attention": ("q", "seq_lens"),
            "paged_attention": ("block_table", "cu_seqlens_q", "seq_lens", "sinks"),
        }.items()
        for arg in args
    },
}


def constant_aspects(record: dict, ops) -> set[tuple[str, str, str]]:
    """(op, argument, aspect) for every aspect ``record`` saw with fewer than two values; an op
    never called is (op, "*", "called")."""
    found = set()
    for op in ops:
        if op not in record:
            found.add((op, "*", "called"))
            continue
        for argument, aspects in record[op].items():
            for aspect, seen in aspects.items():
                if aspect == "value" and seen == ["tensor"]:
                    continue  # always a tensor: its dtype and layout are the aspects
                if len(set(seen)) < 2:
                    found.add((op, argument, aspect))
    return found


def _record(root) -> dict:
    path = root / "record.json"
    env = {**os.environ, "OPCONFORM_RECORD": str(path), "OPCONFORM_RECORD_EXAMPLES": "5"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")])
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:xdist",
               "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "recording_backend",
               "--hypothesis-profile=opconform-record", "--backend-module=recording_backend",
               "--device=cpu", "-k", "not _errors and not rejected"]  # fmt: skip
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    # The verdicts do not matter here (the diffusers scheduler's declared DPM-SDE3 bug fails).
    assert path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(path.read_text())


def test_no_op_argument_is_constant_across_the_suite(tmp_path_factory):
    record = produced_once(tmp_path_factory, "opconform-argument-record", _record)
    found = constant_aspects(record, OPS)
    new = sorted(found - set(HOLDOUTS))
    fixed = sorted(set(HOLDOUTS) - found)
    assert not new, f"held constant by every property that calls the op (vary them, spec/README.md): {new}"
    assert not fixed, f"no longer constant: remove from HOLDOUTS: {fixed}"


def test_a_constant_argument_is_found():
    """A fake recording: a new op whose option is always one value, a tensor always float32 or
    always contiguous, and an op never called are each found; varied aspects are not."""
    record = {
        "new_op": {
            "x": {"value": ["tensor"], "dtype": ["torch.float32"], "layout": ["contiguous", "strided"]},
            "mode": {"value": ["str:'tanh'"]},
            "limit": {"value": ["<omitted>", "float:7.0"]},
        },
        "other_op": {
            "x": {"value": ["tensor"], "dtype": ["torch.bfloat16", "torch.float32"], "layout": ["contiguous"]}
        },  # fmt: skip
    }
    assert constant_aspects(record, ["new_op", "other_op", "never_op"]) == {
        ("new_op", "x", "dtype"),
        ("new_op", "mode", "value"),
        ("other_op", "x", "layout"),
        ("never_op", "*", "called"),
    }


def test_the_recording_names_arguments_as_the_protocol_does():
    """Positional and keyword calls record under the protocol's names; a defaulted argument left
    out records as omitted; a tensor records its dtype and layout."""
    import recording_backend as rec
    import torch

    rec.RECORD.clear()
    backend = rec.RecordingBackend()
    x = torch.randn(4, 6)
    backend.encoder_attention_mask(4)
    backend.encoder_attention_mask(4, sliding_window=2)
    backend.rms_norm(x[:, ::2], torch.ones(3), eps=1e-6)
    recorded = rec.RECORD
    assert recorded["encoder_attention_mask"]["sliding_window"]["value"] == {"<omitted>", "int:2"}
    assert recorded["encoder_attention_mask"]["seq_len"]["value"] == {"int:4"}
    assert recorded["rms_norm"]["x"]["layout"] == {"strided"} and recorded["rms_norm"]["weight"][
        "layout"
    ] == {"contiguous"}
    assert recorded["rms_norm"]["eps"]["value"] == {"float:1e-06"}
    rec.RECORD.clear()

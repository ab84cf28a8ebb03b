"""Words that mean what they say: metamorphic comparisons name the backend's own run, ERRORS name
the bad value, the serving oracle blames the right argument, and a wheel needs no extra for numpy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from suite_runner import run_suite

from conformance.bad_input.activations import ERRORS
from conformance.checks import ConformanceError, assert_close
from reference import attention, serving
from reference.activations import gelu_and_mul

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent


def test_assert_close_names_the_expected_side_as_told():
    with pytest.raises(ConformanceError) as caught:
        assert_close(torch.ones(2), torch.tensor([1.0, float("nan")]), clause="SERVE-EXTEND", context="c",
                     family="attention", expected_as="backend's own reference run")  # fmt: skip
    message = str(caught.value)
    assert "got 1.0, backend's own reference run nan" in message and "expected" not in message, message


def test_error_records_show_the_bad_value_not_their_id():
    case = next(c for c in ERRORS if c.id == "gelu_and_mul-bad-approximate")
    assert case.bad_input() == "approximate='erf'"


BACKENDS = """
import torch

from backends.native import NativeBackend


class LaxMode(NativeBackend):
    name = "lax-mode"

    def gelu_and_mul(self, x, *, approximate):  # an unknown mode silently means "none"
        return super().gelu_and_mul(x, approximate="tanh" if approximate == "tanh" else "none")


class ContiguousRead(NativeBackend):
    name = "contiguous-read"

    def silu_and_mul(self, x):  # reads x's storage as contiguous rows, whatever its strides
        contiguous = torch.empty(x.shape).stride()
        return super().silu_and_mul(torch.as_strided(x, x.shape, contiguous, x.storage_offset()))


BACKENDS = [LaxMode(), ContiguousRead()]
"""


def test_suite_messages_name_the_value_and_the_backends_own_run(tmp_path):
    """Through the real entry point: ACT-ERRORS shows approximate='erf', ACT-VIEWS' comparison of
    a view with its contiguous copy calls the copy's result the backend's own, not "expected"."""
    (tmp_path / "wordy.py").write_text(textwrap.dedent(BACKENDS))
    document = run_suite(
        tmp_path, paths=["conformance/test_activations.py"], modules=["wordy:BACKENDS"],
        pythonpath=[tmp_path], profile="ci-noshrink",
        extra=["-k", "(test_should_reject_bad_input and bad-approximate) or "
               "(test_should_accept_views and silu)"],
    )  # fmt: skip
    out = document["stdout"]
    errors = [line for line in out.splitlines() if "[ACT-ERRORS]" in line]
    assert errors and all("bad input approximate='erf'" in line for line in errors), errors
    assert not any("'bad-approximate'" in line for line in errors), errors
    # ACT-VIEWS is a SHOULD clause: its failure's whole message is in the results (the terminal lists it).
    views = [c.get("message") or "" for c in document["results"] if "test_should_accept_views" in c["nodeid"]]
    assert any("backend's contiguous-copy result" in message for message in views), views
    layout = [line for message in views for line in message.splitlines() if "largest violation" in line]
    assert layout and not any(", expected " in line for line in layout), layout


def test_block_table_rows_against_sequences_blame_block_table():
    q, cache = torch.randn(1, 2, 16), torch.randn(4, 2, 1, 16)
    with pytest.raises(ValueError, match=r"^block_table must have 1 rows .* got 2$"):
        serving.paged_attention(q, cache, cache, block_table=torch.tensor([[0, 1], [2, 3]]),
                                cu_seqlens_q=torch.tensor([0, 1]), seq_lens=torch.tensor([3]),
                                sliding_window=None, softcap=None, sinks=None, scale=0.25)  # fmt: skip


def _paged(**overrides):
    q, cache = torch.randn(3, 2, 16), torch.randn(4, 2, 1, 16)
    call = {"q": q, "k_cache": cache, "v_cache": cache.clone(), "block_table": torch.tensor([[0, 1], [2, 3]]),
            "cu_seqlens_q": torch.tensor([0, 1, 3]), "seq_lens": torch.tensor([3, 4]), "sliding_window": None,
            "softcap": None, "sinks": None, "scale": 0.25, **overrides}  # fmt: skip
    return serving.paged_attention(call.pop("q"), call.pop("k_cache"), call.pop("v_cache"), **call)


@pytest.mark.parametrize(
    ("call", "line"),
    [
        (lambda: _paged(cu_seqlens_q=[0, 1, 3]), r"^cu_seqlens_q must be a 1-D integer tensor, got a list"),
        (lambda: _paged(q=torch.randn(3, 2, 16, device="meta")), r"^q is a meta tensor"),
        (lambda: _paged(block_table=torch.zeros(2, 2, dtype=torch.int64, device="meta")), r"^block_table is"),
        (lambda: _paged(q=torch.randn(3, 2, 16, dtype=torch.float16)), r"^k_cache must have q's dtype"),
        (lambda: serving.contiguous_to_paged(torch.ones(4, 1, 16), torch.ones(4, 1, 16), block_size=2),
         r"^k must be a non-empty 4-D tensor"),
        (lambda: attention.prefill_attention(torch.ones(1, 2, 4, 8).half(), *[torch.ones(1, 2, 4, 8)] * 2,
                                             sliding_window=None, padding_mask=None, scale=0.3),
         r"^k must have q's dtype torch.float16"),
        (lambda: gelu_and_mul(torch.ones(2, 4, device="meta"), approximate="none"), r"^x is a meta tensor"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_line_naming_the_argument(call, line):
    with pytest.raises(ValueError, match=line) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_numpy_is_a_dependency_since_torch_warns_without_it():
    """The cause: ``import torch`` without numpy warns "Failed to initialize NumPy" (torch does not
    require numpy); the wheel's own dependencies therefore name it, not only the test extra."""
    hidden = "import sys; sys.modules['numpy'] = None; import torch"
    proc = subprocess.run([sys.executable, "-W", "default", "-c", hidden], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONWARNINGS": "default"})  # fmt: skip
    assert "Failed to initialize NumPy" in proc.stderr, proc.stderr
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.split(";")[0].strip().startswith("numpy") for d in dependencies), dependencies


def test_public_docstrings_name_clauses_not_paths_and_say_layouts():
    """An installed wheel has no spec/ folder: the public oracles and protocols cite clause IDs."""
    import importlib
    import inspect

    from backends import protocols

    public = [
        getattr(protocols, name) for name in protocols.__all__ if inspect.isclass(getattr(protocols, name))
    ]
    for module in (
        "activations",
        "attention",
        "masks",
        "norms",
        "scheduler",
        "serving",
        "serving_windows",
        "kv_cache",
        "rope",
        "rope_config",
        "moe",
        "moe_config",
        "quant",
    ):
        mod = importlib.import_module(f"reference.{module}")
        public += [mod, *(getattr(mod, name) for name in getattr(mod, "__all__", ()))]
    cited = {getattr(obj, "__qualname__", getattr(obj, "__name__", "")): obj.__doc__ or "" for obj in public}
    assert not [name for name, doc in cited.items() if "spec/" in doc]
    assert "[B, Hq, S, D]" in attention.prefill_attention.__doc__
    assert "[T, Hq, Dqk]" in serving.paged_attention.__doc__


def test_decode_oracle_accepts_its_own_low_precision_inputs():
    """The one-dtype rule (ATTN-ERRORS) is not broken by the decode oracle itself: it hands its
    float64 key window to ``attention`` with the query upcast too (a regression: bf16 q failed)."""
    q, cache = torch.randn(2, 2, 1, 8).bfloat16(), torch.randn(2, 1, 5, 8).bfloat16()
    out = attention.decode_attention(q, cache, cache, torch.tensor([3, 5]), sliding_window=2, scale=0.3)
    assert out.shape == (2, 2, 1, 8) and out.dtype == torch.float64


def test_a_wrong_mask_entry_is_named_by_its_relation():
    """MASK-ENC and MASK-SWA-DECODE name the first wrong entry by row, key, distance and window."""
    from conformance import test_masks

    assert test_masks.encoder_relation((7, 2), True, sliding_window=5, padding_mask=None) == (
        "row 7 attends key 2 at distance 5 >= sliding_window 5"
    )
    assert test_masks.encoder_relation((0, 0, 3, 5), True, sliding_window=None, padding_mask=None) == (
        "row 3 attends key 5 a later key (causal)"
    )
    padding = torch.tensor([[True, False, True, True]])
    assert test_masks.encoder_relation((0, 0, 3, 1), True, sliding_window=None, padding_mask=padding) == (
        "row 3 attends key 1 a padded key of sequence 0"
    )
    assert test_masks.decode_relation((0, 0, 15), False, seq_lens=[17], window=1) == (
        "sequence 0 keeps key 15, outside keys 16..16 visible at position 16 with window 1"
    )


def test_the_relation_shows_digits_until_got_and_expected_differ():
    """assert_close's relation: 4 significant digits, more when they would print alike."""
    with pytest.raises(ConformanceError) as error:
        assert_close(torch.tensor([-1.0893947]), torch.tensor([-1.0893718], dtype=torch.float64),
                     clause="NORM-RMS", context="c", family="norms")  # fmt: skip
    assert error.value.relation == "got -1.08939, expected -1.08937 at (0,)"

"""The tolerance table in spec/tolerances.md (TOL-TABLE) is the one the code uses."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from conformance.tolerances import SCALING_RULES, TOLERANCES, Tolerance, rounding_bound

SPEC = Path(__file__).resolve().parent.parent / "spec" / "tolerances.md"
ROW = re.compile(r"^\|\s*([a-z-]+)\s*\|\s*(float\d+|bfloat16)\s*\|\s*([0-9.e-]+)\s*\|\s*([0-9.e-]+)\s*\|")


def spec_table() -> dict:
    table: dict = {}
    for line in SPEC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            family, dtype, rtol, atol = match.groups()
            table.setdefault(family, {})[getattr(torch, dtype)] = Tolerance(float(rtol), float(atol))
    return table


def test_spec_table_equals_code_table():
    """Every family/dtype entry is documented in the spec with the same rtol and atol, and vice versa."""
    assert spec_table() == TOLERANCES


def test_every_scaling_rule_is_documented_in_the_spec():
    """Each scaling rule of conformance/tolerances.py is a row of the spec's scaling-rule table."""
    first_cells = [line.split("|")[1] for line in SPEC.read_text().splitlines() if line.startswith("| `")]
    rules = {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}
    assert {rule.__name__ for rule in SCALING_RULES} <= rules


def test_rounding_bound_equals_the_written_out_sums():
    """ACT-TOL-ROUNDED: the autograd sum equals spec/tolerances.md's closed forms for NewGELU and
    QuickGELU, term by term (u = eps/2; tanh and sigmoid count 2u)."""
    x = torch.linspace(-8, 8, 801, dtype=torch.float64).to(torch.float16)
    v = x.double()
    u = torch.finfo(torch.float16).eps / 2
    m, c, k = v / 2, math.sqrt(2 / math.pi), 0.044715
    t = c * (v + k * v**3)
    h = torch.tanh(t)
    e = m * (1 + h)
    new_gelu = u * (2 * e.abs() + 2 * (m * h).abs() + 3 * (m * (1 - h**2) * t).abs()
                    + 3 * (m * (1 - h**2) * c * k * v**3).abs())  # fmt: skip
    torch.testing.assert_close(rounding_bound("new_gelu", x), new_gelu, rtol=1e-12, atol=0)
    z = 1.702 * v
    s = torch.sigmoid(z)
    quick = u * (2 * (v * s).abs() + 2 * (v * s * (1 - s) * z).abs())
    torch.testing.assert_close(rounding_bound("quick_gelu", x), quick, rtol=1e-12, atol=0)


def test_rounding_bound_names_a_bad_op():
    with pytest.raises(ValueError, match="op must be one of"):
        rounding_bound("gelu_and_mul", torch.ones(4))

"""Self-tests of the scheduler oracle: independent formulations, the diffusers peer, error inputs."""

from __future__ import annotations

import importlib
import inspect
import itertools
import re

import pytest
import torch

from conformance.strategies.scheduler import CONSTRUCT_CASES, TrajectoryRecipe, synthetic_model_output
from conformance.tolerances import tolerance
from reference import scheduler as oracle


def diffusers_class():
    try:
        return importlib.import_module("diffusers").DPMSolverMultistepScheduler
    except Exception as exc:  # noqa: BLE001 - any import failure means the peer is unavailable
        pytest.skip(f"diffusers is not installed or failed to import: {exc}")


# --- independent formulations (spec text, not the oracle's own update formula) --------------------
@pytest.mark.parametrize("flow", [False, True])
@pytest.mark.parametrize("order, algorithm", [(1, "dpmsolver++"), (2, "dpmsolver++"), (3, "dpmsolver++")])
def test_constant_data_prediction_is_solved_exactly(flow, order, algorithm):
    """DPM-TRAJ: with x0 = c the exact ODE step is x_t = alpha_t c + (sigma_t/sigma_s)(x_s - alpha_s c)."""
    config = {"solver_order": order, "prediction_type": "sample", "use_flow_sigmas": flow, "flow_shift": 3.0}
    ref = oracle.DPMSolverMultistep(**config)
    ref.set_timesteps(12)
    c = torch.linspace(-1, 1, 6, dtype=torch.float64)
    x = torch.randn(6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for i, t in enumerate(ref.timesteps.tolist()):
        a_s, s_s = ref.alpha_sigma(ref.sigmas[i])
        a_t, s_t = ref.alpha_sigma(ref.sigmas[i + 1])
        exact = a_t * c + (s_t / s_s) * (x - a_s * c)
        x = ref.step(c, t, x).prev_sample
        torch.testing.assert_close(x, exact, rtol=1e-12, atol=1e-12)


def test_sde_step_keeps_the_marginal():
    """DPM-NOISE: x_s = alpha_s c + sigma_s eps steps to alpha_t c + sigma_t (e^-h eps + sqrt(1-e^-2h) z)."""
    ref = oracle.DPMSolverMultistep(
        algorithm_type="sde-dpmsolver++", solver_order=1, prediction_type="sample"
    )
    ref.set_timesteps(10)
    gen = torch.Generator().manual_seed(1)
    c, eps, z = (torch.randn(5, generator=gen, dtype=torch.float64) for _ in range(3))
    a_s, s_s = ref.alpha_sigma(ref.sigmas[0])
    a_t, s_t = ref.alpha_sigma(ref.sigmas[1])
    h = ref.log_snr(ref.sigmas[1]) - ref.log_snr(ref.sigmas[0])
    got = ref.step(c, int(ref.timesteps[0]), a_s * c + s_s * eps, variance_noise=z).prev_sample
    want = a_t * c + s_t * (torch.exp(-h) * eps + torch.sqrt(1 - torch.exp(-2 * h)) * z)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("solver_type, exact", [("heun", True), ("midpoint", False)])
def test_heun_is_exact_for_a_data_prediction_linear_in_lambda(solver_type, exact):
    """DPM-TRAJ: for x0(lambda) = a + b lambda, the exact step adds alpha_t [a (1-e^-h) + b (lambda_t - 1 -
    (lambda_s - 1) e^-h)]; heun reproduces it after the first step, midpoint does not."""
    ref = oracle.DPMSolverMultistep(
        solver_type=solver_type,
        prediction_type="sample",
        final_sigmas_type="sigma_min",
        lower_order_final=False,
    )
    ref.set_timesteps(8)
    a, b = 0.3, 0.2
    x = torch.tensor([0.5, -1.0], dtype=torch.float64)
    errors = []
    for i, t in enumerate(ref.timesteps.tolist()):
        lam_s, lam_t = ref.log_snr(ref.sigmas[i]), ref.log_snr(ref.sigmas[i + 1])
        (_, s_s), (a_t, s_t) = ref.alpha_sigma(ref.sigmas[i]), ref.alpha_sigma(ref.sigmas[i + 1])
        e = torch.exp(-(lam_t - lam_s))
        expected = (s_t / s_s) * x + a_t * (a * (1 - e) + b * (lam_t - 1 - (lam_s - 1) * e))
        x = ref.step(torch.full_like(x, a + b * float(lam_s)), t, x).prev_sample
        if i > 0:
            errors.append(float((x - expected).abs().max()))
    assert (max(errors) < 1e-10) == exact, errors


def test_sde_third_order_coefficient_vanishes_with_h():
    """DPM-SDE3: the oracle's D2 coefficient behaves like h/3 as h -> 0 (diffusers 0.42's tends to -1)."""
    h = torch.tensor([1e-3, 1e-2], dtype=torch.float64)
    torch.testing.assert_close(oracle.sde_third_order_d2_coefficient(h), h / 3, rtol=2e-2, atol=0)


# --- the diffusers peer -------------------------------------------------------------------------------
GRID = [
    {
        "algorithm_type": algorithm,
        "solver_order": order,
        "solver_type": solver_type,
        "prediction_type": prediction,
        **schedule,
    }
    for algorithm, order, solver_type, prediction in itertools.product(
        oracle.ALGORITHM_TYPES, (1, 2, 3), oracle.SOLVER_TYPES, oracle.PREDICTION_TYPES
    )
    if not (algorithm == "sde-dpmsolver++" and order == 3)  # DPM-SDE3: a documented disagreement
    for schedule in (
        {"use_flow_sigmas": True, "flow_shift": 3.0},
        {"beta_schedule": "scaled_linear", "timestep_spacing": "trailing", "final_sigmas_type": "sigma_min"},
        {"timestep_spacing": "leading", "lower_order_final": False, "euler_at_final": True},
    )
]
GRID_STEPS = (1, 2, 5, 14, 20)


def test_oracle_agrees_with_diffusers_on_the_grid():
    """The oracle and diffusers agree on timesteps exactly and on every float32 step of the grid
    (configurations x step counts) within the scheduler tolerance."""
    peer_class = diffusers_class()
    tol = tolerance("scheduler", torch.float32)
    worst = 0.0
    for config, steps in itertools.product(GRID, GRID_STEPS):
        peer, ref = peer_class(**config), oracle.DPMSolverMultistep(**config)
        peer.set_timesteps(steps)
        ref.set_timesteps(steps)
        assert peer.timesteps.tolist() == ref.timesteps.tolist(), (config, steps)
        recipe = TrajectoryRecipe(config=config, steps=steps, shape=(3, 4), dtype=torch.float32, seed=steps)
        sample, noises = recipe.initial_sample("cpu"), recipe.noises()
        for i in range(steps):
            model_output = synthetic_model_output(ref, i, sample).float()
            got = peer.step(model_output, peer.timesteps[i], sample, variance_noise=noises[i]).prev_sample
            want = ref.step(model_output, int(ref.timesteps[i]), sample, variance_noise=noises[i]).prev_sample
            excess = ((got.double() - want).abs() / (tol.atol + tol.rtol * want.abs())).max().item()
            worst = max(worst, excess)
            assert excess <= 1.0, (config, steps, i, excess)
            sample = got
    print(f"grid {len(GRID)} configs x {len(GRID_STEPS)} step counts; worst error/allowed {worst:.3g}")


def test_diffusers_third_order_sde_differs_by_the_documented_term():
    """DPM-SDE3: diffusers' third-order SDE step is the oracle's minus alpha_t D2 (-0.5 for +0.5)."""
    peer_class = diffusers_class()
    config = {"algorithm_type": "sde-dpmsolver++", "solver_order": 3, "prediction_type": "sample"}
    peer, ref = peer_class(**config), oracle.DPMSolverMultistep(**config)
    peer.set_timesteps(10)
    ref.set_timesteps(10)
    gen = torch.Generator().manual_seed(2)
    m = [torch.randn(4, generator=gen) for _ in range(3)]
    x, z = torch.randn(4, generator=gen), torch.zeros(4)
    for i in range(3):
        got = peer.step(m[i], peer.timesteps[i], x, variance_noise=z).prev_sample
        want = ref.step(m[i], int(ref.timesteps[i]), x, variance_noise=z).prev_sample
        x = got
    lam = [ref.log_snr(ref.sigmas[k]) for k in (3, 2, 1, 0)]  # lambda_t, s0, s1, s2
    h, r0, r1 = lam[0] - lam[1], (lam[1] - lam[2]) / (lam[0] - lam[1]), (lam[2] - lam[3]) / (lam[0] - lam[1])
    m0, m1, m2 = (v.double() for v in (m[2], m[1], m[0]))
    d2 = ((m0 - m1) / r0 - (m1 - m2) / r1) / (r0 + r1)
    alpha_t, _ = ref.alpha_sigma(ref.sigmas[3])
    torch.testing.assert_close(got.double() - want, -alpha_t * d2, rtol=1e-3, atol=1e-4)
    del h


@pytest.mark.parametrize("spacing", oracle.TIMESTEP_SPACINGS)
@pytest.mark.parametrize("flow", [False, True])
def test_schedule_agrees_with_diffusers(spacing, flow):
    """DPM-TIMESTEPS: timesteps equal and sigmas within the table for n = 1..50 (and trailing's n=61 case)."""
    peer_class = diffusers_class()
    config = {"timestep_spacing": spacing, "use_flow_sigmas": flow, "flow_shift": 3.0}
    tol = tolerance("scheduler-sigmas", torch.float32)
    for steps in range(1, 51):
        peer, ref = peer_class(**config), oracle.DPMSolverMultistep(**config)
        peer.set_timesteps(steps)
        ref.set_timesteps(steps)
        assert peer.timesteps.tolist() == ref.timesteps.tolist(), steps
        torch.testing.assert_close(peer.sigmas.double(), ref.sigmas, rtol=tol.rtol, atol=tol.atol)


def test_trailing_has_exactly_n_timesteps_where_diffusers_adds_one():
    """DPM-TIMESTEPS: trailing with n = 61 of N = 1000 has 61 timesteps; diffusers 0.42 appends a -1."""
    ref = oracle.DPMSolverMultistep(timestep_spacing="trailing")
    ref.set_timesteps(61)
    assert len(ref.timesteps) == 61 and int(ref.timesteps.min()) >= 0
    peer = diffusers_class()(timestep_spacing="trailing")
    peer.set_timesteps(61)
    assert peer.timesteps.tolist()[:61] == ref.timesteps.tolist()
    assert peer.timesteps.tolist()[61:] in ([], [-1])


# --- error inputs -------------------------------------------------------------------------------
CONFIG_ERRORS = [
    ({"prediction_type": "x0"}, "prediction_type"),
    ({"algorithm_type": "dpmsolver"}, "algorithm_type"),
    ({"algorithm_type": "deis"}, "algorithm_type"),
    ({"solver_type": "bh2"}, "solver_type"),
    ({"solver_order": 0}, "solver_order"),
    ({"solver_order": 4}, "solver_order"),
    ({"beta_schedule": "cosine"}, "beta_schedule"),
    ({"final_sigmas_type": "max"}, "final_sigmas_type"),
    ({"timestep_spacing": "karras"}, "timestep_spacing"),
    ({"flow_shift": 0.0}, "flow_shift"),
    ({"eta": 0.0}, "eta"),
]


@pytest.mark.parametrize("config, field", CONFIG_ERRORS, ids=[f for _, f in CONFIG_ERRORS])
def test_bad_configuration_names_the_field(config, field):
    """DPM-ERRORS: a bad configuration raises ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        oracle.DPMSolverMultistep(**config)


def test_bad_inputs_raise_value_errors():
    """DPM-ERRORS: n out of range, step before set_timesteps, a timestep not in the schedule."""
    ref = oracle.DPMSolverMultistep(num_train_timesteps=100)
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="set_timesteps"):
        ref.step(x, 99, x)
    for n in (0, 101):
        with pytest.raises(ValueError, match="num_inference_steps"):
            ref.set_timesteps(n)
    ref.set_timesteps(5)
    with pytest.raises(ValueError, match="not in the schedule"):
        ref.step(x, 7, x)
    ref.step(x, int(ref.timesteps[0]), x)
    with pytest.raises(ValueError, match="not the next"):
        ref.step(x, int(ref.timesteps[3]), x)
    with pytest.raises(TypeError):
        ref.step(x, int(ref.timesteps[1]), x, eta=0.0)


# --- DPM-CONFIG: the defaults the spec lists, and diffusers' own defaults --------------------------
SPEC_DEFAULTS = {  # written from spec/scheduler.md, DPM-CONFIG
    "num_train_timesteps": 1000, "beta_start": 1e-4, "beta_end": 0.02, "beta_schedule": "linear",
    "solver_order": 2, "prediction_type": "epsilon", "algorithm_type": "dpmsolver++",
    "solver_type": "midpoint", "lower_order_final": True, "euler_at_final": False,
    "use_flow_sigmas": False, "flow_shift": 1.0, "final_sigmas_type": "zero", "timestep_spacing": "linspace",
}  # fmt: skip


@pytest.mark.clause("DPM-CONFIG")
def test_configuration_defaults_are_the_spec_and_diffusers_defaults():
    """The oracle's configuration defaults are DPM-CONFIG's, which are diffusers' (the peer): its built
    config and its ``__init__`` signature, the source DPM-CONSTRUCT cites."""
    config = oracle.DPMSolverMultistep().config
    assert {key: getattr(config, key) for key in SPEC_DEFAULTS} == SPEC_DEFAULTS
    peer = diffusers_class()
    assert {key: peer().config[key] for key in SPEC_DEFAULTS} == SPEC_DEFAULTS
    signature = inspect.signature(peer.__init__).parameters
    assert {key: signature[key].default for key in SPEC_DEFAULTS} == SPEC_DEFAULTS


def test_one_wrong_default_fails_only_its_own_construct_case(tmp_path):
    """DPM-CONSTRUCT: a backend (through --backend-module) with exactly one wrong default fails the
    "without-KEY" case of that key and no other key's (each case leaves out only its key)."""
    from tests.suite_runner import run_suite

    wrong = {"wrong-beta-schedule-default": "beta_schedule", "wrong-flow-shift-none-default": "flow_shift"}
    document = run_suite(
        tmp_path,
        paths=["conformance/test_scheduler.py"],
        modules=["mutants.scheduler:BACKENDS"],
        extra=[*(f"--backend={name}" for name in wrong), "-k", "test_omitted_keys_take_diffusers_defaults"],
    )
    case_id = re.compile(r"without-[a-z_]+|sana-published")
    keys = {f"without-{k}" for k in CONSTRUCT_CASES}
    for mutant, key in wrong.items():
        cases = [c for c in document["results"] if c["backend"] == mutant]
        assert len(cases) == len(keys) + 2, [c["nodeid"] for c in cases]
        failed = {case_id.search(c["nodeid"]).group() for c in cases if c["outcome"] == "failed"}
        assert failed & keys == {f"without-{key}"}, (mutant, sorted(failed))

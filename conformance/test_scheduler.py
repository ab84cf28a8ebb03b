"""Conformance properties for spec/scheduler.md (the DPM-Solver++ multistep scheduler).

The op is ``dpm_scheduler(**config)``, returning a scheduler object with ``set_timesteps``,
``timesteps``, ``sigmas`` and ``step``. Each property drives it with the synthetic denoiser of
conformance/strategies/scheduler.py and compares every step with the float64 oracle.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from conformance.checks import ConformanceError, assert_close, check, describe
from conformance.strategies.scheduler import (
    CONSTRUCT_CASES,
    DEFAULT_CONFIG,
    SANA_CONFIG,
    SANA_STEPS,
    SDE,
    TrajectoryRecipe,
    construct_case,
    order_threshold_trajectories,
    partial_configs,
    sana_trajectory,
    scheduler_configs,
    synthetic_model_output,
    trajectories,
)
from conformance.tolerances import conversion_magnitude, dpm_atol_scale
from reference import scheduler as oracle

ORDER_THRESHOLD = order_threshold_trajectories()
FAMILY = "scheduler"
OP = "dpm_scheduler"
STEP_PARAMETERS = [
    ("model_output", inspect.Parameter.empty),
    ("timestep", inspect.Parameter.empty),
    ("sample", inspect.Parameter.empty),
    ("generator", None),
    ("variance_noise", None),
    ("return_dict", True),
]


def prev_sample_of(result, *, return_dict: bool = True) -> torch.Tensor:
    return result.prev_sample if return_dict else result[0]


def run_trajectory(backend, device, recipe: TrajectoryRecipe, *, clause: str, backend_config=None):
    """Drive the backend and the oracle through one schedule in lockstep (the oracle gets the
    backend's own samples); yield (index, context, got, expected, atol_scale) per step. The backend
    is built from ``backend_config`` when given (DPM-CONSTRUCT: keys left out), else the recipe's."""
    scheduler = backend.dpm_scheduler(**(recipe.config if backend_config is None else backend_config))
    reference = oracle.DPMSolverMultistep(**recipe.config)
    scheduler.set_timesteps(recipe.steps, device=device)
    reference.set_timesteps(recipe.steps)
    context = describe(backend, device, OP, config=recipe.config, steps=recipe.steps, dtype=recipe.dtype)
    check(
        len(scheduler.timesteps) == recipe.steps,
        clause=clause,
        message=f"{context}: {len(scheduler.timesteps)} timesteps for {recipe.steps} steps",
    )
    sde = recipe.config.get("algorithm_type") == SDE
    sample, noises, magnitudes = recipe.initial_sample(device), recipe.noises(), []
    for index in range(recipe.steps):
        model_output = synthetic_model_output(reference, index, sample).to(recipe.dtype).to(device)
        noise = {"variance_noise": noises[index].to(device)} if sde else {}
        got = scheduler.step(model_output, scheduler.timesteps[index], sample, **noise).prev_sample
        _, coeffs, _ = reference.update_coefficients(reference.order_for_step(index), index)
        magnitudes.insert(0, conversion_magnitude(reference, index, sample, model_output))
        want = reference.step(model_output, int(reference.timesteps[index]), sample, **noise).prev_sample
        yield index, context, got, want, dpm_atol_scale(recipe.dtype, coeffs, magnitudes)
        sample = got


@pytest.mark.clause("DPM-TRAJ", "DPM-ORDER")
@pytest.mark.op(OP)
@given(recipe=trajectories())
@example(recipe=sana_trajectory(torch.float32))
@example(recipe=sana_trajectory(torch.bfloat16))
@example(recipe=ORDER_THRESHOLD[0])  # DPM-ORDER's threshold at 14, 15 and 16 steps, always run
@example(recipe=ORDER_THRESHOLD[1])
@example(recipe=ORDER_THRESHOLD[2])
def test_trajectory_matches_oracle(backend, device, recipe):
    """Every prev_sample of a whole schedule matches the oracle, in the model dtype, on its device."""
    for index, context, got, want, atol_scale in run_trajectory(backend, device, recipe, clause="DPM-TRAJ"):
        check(
            got.dtype == recipe.dtype and got.device.type == torch.device(device).type,
            clause="DPM-TRAJ",
            message=f"{context}: step {index} returned {got.dtype} on {got.device}; "
            f"expected {recipe.dtype} on {device}",
        )
        assert_close(
            got,
            want,
            clause="DPM-TRAJ",
            family=FAMILY,
            atol_scale=atol_scale,
            context=f"{context}, step {index} of {recipe.steps}",
        )


SDE3_CASES = [
    pytest.param({"prediction_type": "epsilon"}, 10, id="vp-epsilon-midpoint-10"),
    pytest.param({"prediction_type": "v_prediction", "solver_type": "heun"}, 25, id="vp-v-heun-25"),
    pytest.param(SANA_CONFIG, SANA_STEPS, id="sana-20"),
]


@pytest.mark.clause("DPM-SDE3")
@pytest.mark.op(OP)
@pytest.mark.parametrize("config, steps", SDE3_CASES)
def test_sde_third_order_matches_oracle(backend, device, config, steps):
    """The third-order sde-dpmsolver++ step matches the oracle (its D2 coefficient vanishes as h -> 0)."""
    config = {**config, "algorithm_type": SDE, "solver_order": 3}
    recipe = TrajectoryRecipe(config=config, steps=steps, shape=(2, 8), dtype=torch.float32, seed=5)
    for index, context, got, want, atol_scale in run_trajectory(backend, device, recipe, clause="DPM-SDE3"):
        assert_close(
            got,
            want,
            clause="DPM-SDE3",
            family=FAMILY,
            atol_scale=atol_scale,
            context=f"{context}, step {index} of {recipe.steps}",
        )


@pytest.mark.clause("DPM-TIMESTEPS")
@pytest.mark.op(OP)
@given(config=scheduler_configs(), steps=st.integers(1, 50))
@example(config=dict(SANA_CONFIG), steps=SANA_STEPS)
def test_timesteps_and_sigmas_match_oracle(backend, device, config, steps):
    """After set_timesteps(n): the n timesteps equal the oracle's; the n+1 sigmas match within the table."""
    scheduler = backend.dpm_scheduler(**config)
    reference = oracle.DPMSolverMultistep(**config)
    scheduler.set_timesteps(steps, device=device)
    reference.set_timesteps(steps)
    context = describe(backend, device, OP, config=config, steps=steps)
    got = scheduler.timesteps.detach().cpu().tolist()
    want = reference.timesteps.tolist()
    check_timesteps_dtype(scheduler, clause="DPM-TIMESTEPS", context=context)
    check(got == want, clause="DPM-TIMESTEPS", message=f"{context}: timesteps {got}, expected {want}")
    sigmas = scheduler.sigmas.detach()
    assert_close(
        sigmas,
        reference.sigmas,
        clause="DPM-TIMESTEPS",
        family="scheduler-sigmas",
        context=f"{context}: sigmas",
    )


def check_timesteps_dtype(scheduler, *, clause: str, context: str) -> None:
    """DPM-TIMESTEPS names int64 timesteps: compared as a list of numbers, a float tensor would pass."""
    dtype = getattr(scheduler.timesteps, "dtype", type(scheduler.timesteps).__name__)
    check(dtype == torch.int64, clause=clause, message=f"{context}: timesteps of {dtype}, expected int64")


def check_construction(backend, device, config: dict, steps: int) -> None:
    """DPM-CONSTRUCT: the backend built from ``config`` (keys left out) gives the timesteps, sigmas and
    every step of the oracle built from DPM-CONFIG's defaults with ``config`` on top."""
    full = {**DEFAULT_CONFIG, **config}
    omitted = sorted(set(full) - set(config))
    context = f"{describe(backend, device, OP, config=config, steps=steps)}, omitted={omitted}"
    recipe = TrajectoryRecipe(config=full, steps=steps, shape=(2, 8), dtype=torch.float32, seed=13)
    try:
        scheduler = backend.dpm_scheduler(**config)
        scheduler.set_timesteps(steps, device=device)
        reference = oracle.DPMSolverMultistep(**full)
        reference.set_timesteps(steps)
        got, want = scheduler.timesteps.detach().cpu().tolist(), reference.timesteps.tolist()
        check_timesteps_dtype(scheduler, clause="DPM-CONSTRUCT", context=context)
        check(got == want, clause="DPM-CONSTRUCT", message=f"{context}: timesteps {got}, expected {want}")
        assert_close(
            scheduler.sigmas.detach(),
            reference.sigmas,
            clause="DPM-CONSTRUCT",
            family="scheduler-sigmas",
            context=f"{context}: sigmas",
        )
        steps_run = run_trajectory(backend, device, recipe, clause="DPM-CONSTRUCT", backend_config=config)
        for index, _, got, want, atol_scale in steps_run:
            step_context = f"{context}, step {index} of {steps}"
            assert_close(
                got, want, clause="DPM-CONSTRUCT", family=FAMILY, atol_scale=atol_scale, context=step_context
            )
    except ConformanceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a construction that crashes breaks the clause
        check(False, clause="DPM-CONSTRUCT", message=f"{context}: raised {type(exc).__name__}: {exc}")


@pytest.mark.clause("DPM-CONSTRUCT")
@pytest.mark.op(OP)
@pytest.mark.parametrize(
    "config, steps",
    [pytest.param(*construct_case(key), id=f"without-{key}") for key in CONSTRUCT_CASES]
    + [pytest.param({}, 10, id="without-all"), pytest.param(SANA_CONFIG, SANA_STEPS, id="sana-published")],
)
def test_omitted_keys_take_diffusers_defaults(backend, device, config, steps):
    """Each key left out of the configuration behaves as diffusers' default; SANA's published config
    (only its three keys) gives SANA's schedule and steps."""
    check_construction(backend, device, config, steps)


@pytest.mark.clause("DPM-CONSTRUCT")
@pytest.mark.op(OP)
@given(config=partial_configs(), steps=st.integers(1, 25))
def test_partial_configs_take_diffusers_defaults(backend, device, config, steps):
    """Any subset of a drawn configuration's keys left out behaves as diffusers' defaults."""
    check_construction(backend, device, config, steps)


def filter_step_kwargs(step, kwargs: dict) -> dict:
    """The serving-framework caller (spec/scheduler.md, DPM-SIGNATURE): keep the keywords ``step`` declares;
    a ``**kwargs`` in its signature is taken to accept every keyword."""
    parameters = inspect.signature(step).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(kwargs)
    return {key: value for key, value in kwargs.items() if key in parameters}


@pytest.mark.clause("DPM-SIGNATURE")
@pytest.mark.op(OP)
def test_step_signature_is_explicit(backend, device):
    """step declares exactly model_output, timestep, sample, generator=None, variance_noise=None,
    return_dict=True, and no **kwargs."""
    scheduler = backend.dpm_scheduler(**SANA_CONFIG)
    parameters = inspect.signature(scheduler.step).parameters.values()
    got = [(p.name, p.default) for p in parameters]
    kinds = {p.name: p.kind.name for p in parameters if p.kind not in (p.POSITIONAL_OR_KEYWORD,)}
    check(
        got == STEP_PARAMETERS and not kinds,
        clause="DPM-SIGNATURE",
        message=f"backend {backend.name!r}: step{inspect.signature(scheduler.step)}; expected "
        f"({', '.join(n if d is inspect.Parameter.empty else f'{n}={d}' for n, d in STEP_PARAMETERS)})"
        + (f"; parameters of other kinds: {kinds}" if kinds else ""),
    )


@pytest.mark.clause("DPM-SIGNATURE")
@pytest.mark.op(OP)
@pytest.mark.parametrize("algorithm", ["dpmsolver++", SDE])
def test_signature_filtering_caller_works(backend, device, algorithm):
    """A caller passing {generator, variance_noise, return_dict, eta} filtered by inspect.signature(step)
    gets the oracle's result; an unknown keyword passed directly raises TypeError."""
    config = {**SANA_CONFIG, "algorithm_type": algorithm}
    recipe = TrajectoryRecipe(config=config, steps=4, shape=(2, 3), dtype=torch.float32, seed=7)
    scheduler = backend.dpm_scheduler(**config)
    reference = oracle.DPMSolverMultistep(**config)
    scheduler.set_timesteps(recipe.steps, device=device)
    reference.set_timesteps(recipe.steps)
    sample = recipe.initial_sample(device)
    model_output = synthetic_model_output(reference, 0, sample).float().to(device)
    noise = recipe.noises()[0].to(device)
    context = describe(backend, device, OP, config=config)
    candidates = {
        "generator": torch.Generator(device="cpu").manual_seed(0),
        "variance_noise": noise,
        "return_dict": False,
        "eta": 0.0,
    }
    try:
        kwargs = filter_step_kwargs(scheduler.step, candidates)
        result = scheduler.step(model_output, scheduler.timesteps[0], sample, **kwargs)
    except TypeError as exc:
        message = f"{context}: the signature-filtering caller failed: {exc}"
        check(False, clause="DPM-SIGNATURE", message=message)
    got = prev_sample_of(result, return_dict=False)
    want = reference.step(model_output, int(reference.timesteps[0]), sample, variance_noise=noise).prev_sample
    assert_close(got, want, clause="DPM-SIGNATURE", family=FAMILY, context=f"{context}: filtered call")
    with pytest.raises(TypeError):
        scheduler.step(model_output, scheduler.timesteps[1], got, eta=0.0)


@pytest.mark.clause("DPM-RETURN")
@pytest.mark.op(OP)
@pytest.mark.parametrize("algorithm", ["dpmsolver++", SDE])
def test_return_forms(backend, device, algorithm):
    """return_dict=False gives the 1-tuple (prev_sample,); True an object with .prev_sample; same values."""
    config = {**SANA_CONFIG, "algorithm_type": algorithm}
    recipe = TrajectoryRecipe(config=config, steps=3, shape=(2, 5), dtype=torch.float32, seed=3)
    as_tuple, as_object = (backend.dpm_scheduler(**config) for _ in range(2))
    reference = oracle.DPMSolverMultistep(**config)
    for scheduler in (as_tuple, as_object, reference):
        scheduler.set_timesteps(recipe.steps, device=device if scheduler is not reference else None)
    sample = recipe.initial_sample(device)
    model_output = synthetic_model_output(reference, 0, sample).float().to(device)
    noise = recipe.noises()[0].to(device)
    context = describe(backend, device, OP, config=config)
    args = (model_output, as_tuple.timesteps[0], sample)
    first = as_tuple.step(*args, variance_noise=noise, return_dict=False)
    check(
        isinstance(first, tuple) and len(first) == 1 and isinstance(first[0], torch.Tensor),
        clause="DPM-RETURN",
        message=f"{context}: return_dict=False returned {type(first).__name__} {first!r:.200}; "
        "expected (prev_sample,)",
    )
    second = as_object.step(*args, variance_noise=noise, return_dict=True)
    check(
        isinstance(getattr(second, "prev_sample", None), torch.Tensor),
        clause="DPM-RETURN",
        message=f"{context}: return_dict=True returned {type(second).__name__} without a tensor .prev_sample",
    )
    check(
        torch.equal(first[0], second.prev_sample),
        clause="DPM-RETURN",
        message=f"{context}: the tuple and object forms hold different prev_sample values",
    )


NOISE_SHAPE = (2, 4, 4)


@pytest.mark.clause("DPM-NOISE")
@pytest.mark.op(OP)
@given(config=scheduler_configs(algorithms=(SDE,)), seed=st.integers(0, 2**31 - 1))
@example(config={**SANA_CONFIG, "algorithm_type": SDE}, seed=0)
def test_sde_noise_sources(backend, device, config, seed):
    """SDE: variance_noise is used exactly when given (even with a generator); otherwise the draw is
    float32 randn from the generator, so the same generator state gives the same output."""
    recipe = TrajectoryRecipe(config=config, steps=5, shape=NOISE_SHAPE, dtype=torch.float32, seed=seed)
    reference = oracle.DPMSolverMultistep(**config)
    reference.set_timesteps(recipe.steps)
    sample = recipe.initial_sample(device)
    model_output = synthetic_model_output(reference, 0, sample).float().to(device)
    context = describe(backend, device, OP, config=config)
    given_noise = recipe.noises()[0].to(device)

    def first_step(**noise_args) -> torch.Tensor:
        scheduler = backend.dpm_scheduler(**config)
        scheduler.set_timesteps(recipe.steps, device=device)
        return scheduler.step(model_output, scheduler.timesteps[0], sample, **noise_args).prev_sample

    def expected(noise) -> torch.Tensor:
        fresh = oracle.DPMSolverMultistep(**config)
        fresh.set_timesteps(recipe.steps)
        return fresh.step(model_output, int(fresh.timesteps[0]), sample, variance_noise=noise).prev_sample

    def generator() -> torch.Generator:
        return torch.Generator(device="cpu").manual_seed(seed + 2)

    with_noise = first_step(variance_noise=given_noise, generator=generator())
    assert_close(
        with_noise,
        expected(given_noise),
        clause="DPM-NOISE",
        family=FAMILY,
        context=f"{context}: variance_noise given (with a generator too)",
    )
    drawn = torch.randn(recipe.shape, generator=generator(), dtype=torch.float32)
    from_generator = first_step(generator=generator())
    assert_close(
        from_generator,
        expected(drawn),
        clause="DPM-NOISE",
        family=FAMILY,
        context=f"{context}: generator only (float32 randn of the output shape)",
    )
    again = first_step(generator=generator())
    check(
        torch.equal(from_generator, again),
        clause="DPM-NOISE",
        message=f"{context}: the same generator state gave different outputs",
    )


@pytest.mark.clause("DPM-NOISE")
@pytest.mark.op(OP)
def test_deterministic_variant_ignores_noise(backend, device):
    """dpmsolver++ gives the same output with or without variance_noise and generator."""
    config = dict(SANA_CONFIG)
    recipe = TrajectoryRecipe(config=config, steps=5, shape=NOISE_SHAPE, dtype=torch.float32, seed=11)
    reference = oracle.DPMSolverMultistep(**config)
    reference.set_timesteps(recipe.steps)
    sample = recipe.initial_sample(device)
    model_output = synthetic_model_output(reference, 0, sample).float().to(device)
    outputs = []
    noise = recipe.noises()[0].to(device)
    for noise_args in ({}, {"variance_noise": noise}, {"generator": torch.Generator()}):
        scheduler = backend.dpm_scheduler(**config)
        scheduler.set_timesteps(recipe.steps, device=device)
        outputs.append(scheduler.step(model_output, scheduler.timesteps[0], sample, **noise_args).prev_sample)
    check(
        all(torch.equal(outputs[0], other) for other in outputs[1:]),
        clause="DPM-NOISE",
        message=f"{describe(backend, device, OP, config=config)}: the deterministic variant's output "
        "changed with variance_noise or generator",
    )

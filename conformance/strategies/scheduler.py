"""Hypothesis strategies and the synthetic denoiser for the scheduler properties (spec/scheduler.md).

A trajectory is drawn as a small recipe (configuration, step count, sample shape, dtype, seed);
the model outputs come from a fixed synthetic denoiser, so every trajectory is a meaningful
denoising run that a wrong solver step visibly changes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from hypothesis import strategies as st

from conformance.strategies.common import FLOAT_DTYPES, pinned_values, seeds
from reference import scheduler as oracle

MODEL_DTYPES = FLOAT_DTYPES
# SANA's scheduler (spec/scheduler.md, DPM-CONFIG): everything else at diffusers' defaults.
SANA_CONFIG = {"flow_shift": 3.0, "use_flow_sigmas": True, "prediction_type": "flow_prediction"}
SANA_STEPS = 20
SDE = "sde-dpmsolver++"
# DPM-CONFIG: the full default configuration (the oracle's, which are diffusers' 0.42 defaults:
# tests/test_reference_scheduler.py checks both). DPM-CONSTRUCT compares a backend built with keys
# left out against the oracle built from these defaults with the given keys on top.
DEFAULT_CONFIG = asdict(oracle.SchedulerConfig())
# DPM-CONSTRUCT: each key that a wrapper's own default could change, with a context (the keys that
# are given) in which leaving it out is visible within the steps, and the step count.
CONSTRUCT_CASES = {
    "beta_schedule": ({}, 10),
    "beta_start": ({}, 10),
    "beta_end": ({}, 10),
    "num_train_timesteps": ({}, 10),
    "use_flow_sigmas": ({}, 10),
    "flow_shift": ({"use_flow_sigmas": True, "prediction_type": "flow_prediction"}, 10),
    "solver_order": ({}, 10),
    "solver_type": ({}, 10),
    "algorithm_type": ({}, 10),
    "prediction_type": ({}, 10),
    "final_sigmas_type": ({}, 10),
    # lower_order_final shows only where it changes an order: third order, a nonzero final sigma.
    "lower_order_final": ({"solver_order": 3, "final_sigmas_type": "sigma_min"}, 6),
    "euler_at_final": ({"final_sigmas_type": "sigma_min"}, 20),
    "timestep_spacing": ({}, 10),
}


def construct_case(key: str) -> tuple[dict, int]:
    """DPM-CONSTRUCT's "without KEY" case: every other key given (its default, or the case's context),
    only ``key`` left out, so a wrong default of one key fails that key's case alone."""
    context, steps = CONSTRUCT_CASES[key]
    config = {**DEFAULT_CONFIG, **context}
    del config[key]
    return config, steps


@dataclass(frozen=True)
class TrajectoryRecipe:
    """A reproducible denoising run: the same recipe always gives the same initial sample and noise."""

    config: dict = field(hash=False)
    steps: int
    shape: tuple
    dtype: torch.dtype
    seed: int

    def initial_sample(self, device) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed)
        return torch.randn(self.shape, generator=gen, dtype=torch.float64).to(self.dtype).to(device)

    def noises(self) -> list[torch.Tensor]:
        """One float32 standard-normal variance_noise per step (the SDE variant's z)."""
        gen = torch.Generator().manual_seed(self.seed + 1)
        return [torch.randn(self.shape, generator=gen, dtype=torch.float32) for _ in range(self.steps)]


def data_estimate(sample: torch.Tensor, timestep: int, num_train_timesteps: int) -> torch.Tensor:
    """The synthetic denoiser's x0: a fixed smooth, bounded function of the sample and timestep."""
    x = sample.detach().to("cpu", torch.float64)
    u = float(timestep) / num_train_timesteps
    return 0.8 * torch.tanh(1.5 * x) * (1.0 - 0.3 * u) + 0.2 * torch.sin(2.0 * x + 3.0 * u)


def synthetic_model_output(reference: oracle.DPMSolverMultistep, index: int, sample: torch.Tensor):
    """The model output (float64, cpu) whose data prediction is ``data_estimate``, in the configured
    prediction type, at schedule position ``index`` of ``reference`` (the oracle's sigmas)."""
    cfg = reference.config
    x = sample.detach().to("cpu", torch.float64)
    x0 = data_estimate(x, int(reference.timesteps[index]), cfg.num_train_timesteps)
    sigma = reference.sigmas[index]
    alpha_t, sigma_t = reference.alpha_sigma(sigma)
    eps = (x - alpha_t * x0) / sigma_t
    if cfg.prediction_type == "epsilon":
        return eps
    if cfg.prediction_type == "sample":
        return x0
    if cfg.prediction_type == "v_prediction":
        return alpha_t * eps - sigma_t * x0
    return (x - x0) / sigma  # flow_prediction: v with x0 = x - sigma v


@st.composite
def scheduler_configs(draw, *, algorithms=("dpmsolver++", SDE), orders=(1, 2, 3), sde_third_order=False):
    """Configurations over every contract field; the third-order SDE step only when asked (DPM-SDE3)."""
    # MODEL-RUN: a pipeline profile's scheduler configuration where the property admits it (SANA's).
    fitting = [c for c in pinned_values("scheduler.config") or ()
               if c["algorithm_type"] in algorithms and c["solver_order"] in orders]  # fmt: skip
    if fitting:
        return dict(draw(st.sampled_from(fitting)))
    algorithm = draw(st.sampled_from(algorithms))
    allowed = [o for o in orders if sde_third_order or not (algorithm == SDE and o == 3)]
    flow = draw(st.booleans())
    return {
        "num_train_timesteps": draw(st.sampled_from((1000, 1000, 500))),
        "beta_schedule": draw(st.sampled_from(oracle.BETA_SCHEDULES)),
        "solver_order": draw(st.sampled_from(allowed)),
        "prediction_type": draw(st.sampled_from(oracle.PREDICTION_TYPES)),
        "algorithm_type": algorithm,
        "solver_type": draw(st.sampled_from(oracle.SOLVER_TYPES)),
        "lower_order_final": draw(st.booleans()),
        "euler_at_final": draw(st.sampled_from((False, False, True))),
        "use_flow_sigmas": flow,
        # spec/scheduler.md, Ranges: a shift also without use_flow_sigmas, where it does nothing
        "flow_shift": draw(st.sampled_from((1.0, 3.0, 6.0))),
        "final_sigmas_type": draw(st.sampled_from(oracle.FINAL_SIGMAS_TYPES)),
        "timestep_spacing": draw(st.sampled_from(oracle.TIMESTEP_SPACINGS)),
    }


@st.composite
def partial_configs(draw):
    """DPM-CONSTRUCT: a drawn configuration with a drawn subset of its keys left out."""
    config = draw(scheduler_configs())
    omitted = draw(st.sets(st.sampled_from(sorted(config))))
    return {key: value for key, value in config.items() if key not in omitted}


@st.composite
def trajectories(draw, *, configs=None, dtypes=MODEL_DTYPES, max_steps: int = 50) -> TrajectoryRecipe:
    """A configuration, 1..max_steps steps, a small sample shape, a model dtype and a seed."""
    config = draw(configs if configs is not None else scheduler_configs())
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 8), min_size=rank, max_size=rank)))
    while math.prod(shape) > 512:
        shape = shape[1:]
    return TrajectoryRecipe(
        config=config,
        steps=draw(st.one_of(st.integers(1, 20), st.integers(21, max_steps), st.sampled_from(AROUND_15))),
        shape=shape,
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds()),
    )


# DPM-ORDER's threshold (spec/scheduler.md, Ranges): lower_order_final lowers the last two steps of a
# schedule shorter than 15; drawn at 14, 15 and 16 steps.
AROUND_15 = (14, 15, 16)


def order_threshold_trajectories() -> list[TrajectoryRecipe]:
    """Third order with a nonzero final sigma (where lower_order_final changes both last steps) at
    14, 15 and 16 steps, lower_order_final at its default."""
    config = {"solver_order": 3, "final_sigmas_type": "sigma_min"}
    return [
        TrajectoryRecipe(config=config, steps=n, shape=(2, 3), dtype=torch.float32, seed=7) for n in AROUND_15
    ]


def sana_trajectory(dtype: torch.dtype = torch.float32, seed: int = 0) -> TrajectoryRecipe:
    """SANA's configuration at its default 20 steps, on a latent-like [1, 4, 8, 8] sample."""
    config = dict(SANA_CONFIG)
    return TrajectoryRecipe(config=config, steps=SANA_STEPS, shape=(1, 4, 8, 8), dtype=dtype, seed=seed)

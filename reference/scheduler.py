"""Oracle for the DPM-Solver++ multistep scheduler contract (clauses DPM-*).

``DPMSolverMultistep`` is written from the DPM-Solver++ formulas (Lu et al. 2022, "DPM-Solver++:
Fast Solver for Guided Sampling of Diffusion Probabilistic Models", arXiv 2211.01095, and the
clause DPM-TRAJ), not from diffusers' code: the self-tests compare it with diffusers'
``DPMSolverMultistepScheduler`` as an independent peer. Everything is computed in float64 on
the CPU; ``step`` returns float64 on the model output's device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from reference.validation import require_choice, require_floating

__all__ = [
    "ALGORITHM_TYPES",
    "BETA_SCHEDULES",
    "FINAL_SIGMAS_TYPES",
    "PREDICTION_TYPES",
    "SOLVER_TYPES",
    "TIMESTEP_SPACINGS",
    "DPMSolverMultistep",
    "SchedulerConfig",
    "StepOutput",
    "sde_third_order_d2_coefficient",
    "training_sigmas",
]

BETA_SCHEDULES = ("linear", "scaled_linear")
PREDICTION_TYPES = ("epsilon", "sample", "v_prediction", "flow_prediction")
ALGORITHM_TYPES = ("dpmsolver++", "sde-dpmsolver++")
SOLVER_TYPES = ("midpoint", "heun")
FINAL_SIGMAS_TYPES = ("zero", "sigma_min")
TIMESTEP_SPACINGS = ("linspace", "leading", "trailing")
SDE_ALGORITHMS = ("sde-dpmsolver++",)
# DPM-ORDER: with fewer steps than this, lower_order_final also lowers the last two steps.
LOWER_ORDER_FINAL_BELOW = 15


@dataclass(frozen=True)
class SchedulerConfig:
    """DPM-CONFIG: the configuration fields the contract covers, with diffusers' defaults."""

    num_train_timesteps: int = 1000
    beta_start: float = 0.0001
    beta_end: float = 0.02
    beta_schedule: str = "linear"
    solver_order: int = 2
    prediction_type: str = "epsilon"
    algorithm_type: str = "dpmsolver++"
    solver_type: str = "midpoint"
    lower_order_final: bool = True
    euler_at_final: bool = False
    use_flow_sigmas: bool = False
    flow_shift: float = 1.0
    final_sigmas_type: str = "zero"
    timestep_spacing: str = "linspace"

    def __post_init__(self):
        validate_config(self)


def _require_bool(value, name: str) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def _require_int(value, name: str, low: int, high: float = math.inf) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        bound = f"{low} <= {name} <= {high}" if high != math.inf else f"{name} >= {low}"
        raise ValueError(f"{name} must be an int with {bound}, got {value!r}")


def _require_positive_float(value, name: str) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def validate_config(config: SchedulerConfig) -> None:
    """DPM-ERRORS: every configuration error is a ValueError naming the field."""
    _require_int(config.num_train_timesteps, "num_train_timesteps", 1)
    _require_positive_float(config.beta_start, "beta_start")
    _require_positive_float(config.beta_end, "beta_end")
    if config.beta_end >= 1:
        raise ValueError(f"beta_end must be < 1, got {config.beta_end!r}")
    require_choice(config.beta_schedule, "beta_schedule", BETA_SCHEDULES)
    _require_int(config.solver_order, "solver_order", 1, 3)
    require_choice(config.prediction_type, "prediction_type", PREDICTION_TYPES)
    require_choice(config.algorithm_type, "algorithm_type", ALGORITHM_TYPES)
    require_choice(config.solver_type, "solver_type", SOLVER_TYPES)
    _require_bool(config.lower_order_final, "lower_order_final")
    _require_bool(config.euler_at_final, "euler_at_final")
    _require_bool(config.use_flow_sigmas, "use_flow_sigmas")
    _require_positive_float(config.flow_shift, "flow_shift")
    require_choice(config.final_sigmas_type, "final_sigmas_type", FINAL_SIGMAS_TYPES)
    require_choice(config.timestep_spacing, "timestep_spacing", TIMESTEP_SPACINGS)
    if config.final_sigmas_type == "zero" and not config.algorithm_type.endswith("++"):
        # Unreachable while ALGORITHM_TYPES holds only the ++ variants; kept as the spec's rule.
        raise ValueError(f"final_sigmas_type 'zero' needs a ++ algorithm_type, got {config.algorithm_type!r}")


def training_sigmas(config: SchedulerConfig) -> torch.Tensor:
    """DPM-TIMESTEPS: sigma_i = sqrt((1 - abar_i) / abar_i), i = 0..N-1, abar = cumprod(1 - beta)."""
    n = config.num_train_timesteps
    if config.beta_schedule == "linear":
        betas = torch.linspace(config.beta_start, config.beta_end, n, dtype=torch.float64)
    else:  # scaled_linear: linear in sqrt(beta)
        betas = torch.linspace(config.beta_start**0.5, config.beta_end**0.5, n, dtype=torch.float64) ** 2
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
    return ((1.0 - alphas_cumprod) / alphas_cumprod).sqrt()


def _linspace(start: float, stop: float, count: int) -> list[float]:
    """start + k * (stop - start) / (count - 1) in float64, the last point exactly ``stop``."""
    if count == 1:
        return [start]
    step = (stop - start) / (count - 1)
    return [start + k * step for k in range(count - 1)] + [stop]


def vp_timesteps(config: SchedulerConfig, n: int) -> list[int]:
    """DPM-TIMESTEPS: the n integer timesteps (descending) of the three spacings of Lin et al. 2023."""
    big_n = config.num_train_timesteps
    if config.timestep_spacing == "linspace":
        # round-half-to-even of k (N-1)/n, k = n..1
        return [round(v) for v in _linspace(0.0, big_n - 1.0, n + 1)][::-1][:-1]
    if config.timestep_spacing == "leading":
        ratio = big_n // (n + 1)
        return [k * ratio for k in range(n, 0, -1)]
    # trailing: round(N + k delta) - 1, k = 0..n-1 (exactly n values), delta = (N - N/n) - N in
    # float64: the step as an arange over [N, 0) by -N/n forms it. Ties (exact value m + 1/2) are
    # decided by this float64 evaluation, so the spec fixes the expression (spec/scheduler.md).
    delta = (big_n - big_n / n) - big_n
    return [round(big_n + k * delta) - 1 for k in range(n)]


def flow_sigmas(config: SchedulerConfig, n: int) -> list[float]:
    """DPM-TIMESTEPS: shifted flow sigmas s' = shift s / (1 + (shift-1) s), descending, without the 0."""
    shift = config.flow_shift
    s = [1.0 - a for a in _linspace(1.0, 1.0 / config.num_train_timesteps, n + 1)]
    shifted = [shift * v / (1.0 + (shift - 1.0) * v) for v in s]
    return shifted[::-1][:-1]


def sde_third_order_d2_coefficient(h: torch.Tensor) -> torch.Tensor:
    """DPM-SDE3: the D2 coefficient (over alpha_t) of the third-order SDE-DPM-Solver++ step.

    The ODE step uses -phi_3 = 0.5 - (e^-h - 1 + h)/h^2 (the published 3M formula). The SDE
    analogue, from the same derivation with the SDE kernel 2 e^{-2(lambda_t - lambda)}, is
    (1 - e^-2h - 2h)/(2h)^2 + 0.5, which vanishes like h/3 as h -> 0 as a third-order term must.
    """
    return (1.0 - torch.exp(-2.0 * h) - 2.0 * h) / (2.0 * h) ** 2 + 0.5


@dataclass
class StepOutput:
    """DPM-RETURN: the object ``step(..., return_dict=True)`` returns."""

    prev_sample: torch.Tensor


class DPMSolverMultistep:
    """DPM-Solver++ (multistep, orders 1-3; ODE and SDE variants) in float64.

    Clauses: DPM-CONFIG, DPM-TIMESTEPS, DPM-SIGNATURE, DPM-NOISE, DPM-RETURN, DPM-TRAJ, DPM-ORDER,
    DPM-SDE3, DPM-ERRORS.
    """

    def __init__(self, **config):
        known = {f.name for f in fields(SchedulerConfig)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"unknown configuration field(s) {unknown}; known: {sorted(known)}")
        self.config = SchedulerConfig(**config)
        self._train_sigmas = training_sigmas(self.config)
        self.timesteps: torch.Tensor | None = None
        self.sigmas: torch.Tensor | None = None
        self._step_index: int | None = None
        self._history: list[torch.Tensor] = []  # data predictions x0, newest last
        self._lower_order_nums = 0

    # DPM-TIMESTEPS ---------------------------------------------------------------------------
    def set_timesteps(self, num_inference_steps: int, device: torch.device | str | None = None) -> None:
        """Build the n-step schedule: ``timesteps`` (int64, n) and ``sigmas`` (float64, n + 1)."""
        n = num_inference_steps
        _require_int(n, "num_inference_steps", 1, self.config.num_train_timesteps)
        cfg = self.config
        if cfg.use_flow_sigmas:
            sigmas = flow_sigmas(cfg, n)
            timesteps = [math.trunc(s * cfg.num_train_timesteps) for s in sigmas]
        else:
            timesteps = vp_timesteps(cfg, n)
            sigmas = [float(self._train_sigmas[t]) for t in timesteps]
        sigma_last = 0.0 if cfg.final_sigmas_type == "zero" else float(self._train_sigmas[0])
        self.timesteps = torch.tensor(timesteps, dtype=torch.int64, device=device)
        self.sigmas = torch.tensor([*sigmas, sigma_last], dtype=torch.float64)
        self._step_index = None
        self._history = []
        self._lower_order_nums = 0

    def alpha_sigma(self, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(alpha_t, sigma_t) of a schedule sigma: flow (1 - s, s); VP (1/sqrt(s^2+1), s/sqrt(s^2+1))."""
        if self.config.use_flow_sigmas:
            return 1.0 - sigma, sigma
        alpha = 1.0 / torch.sqrt(sigma**2 + 1.0)
        return alpha, sigma * alpha

    def log_snr(self, sigma: torch.Tensor) -> torch.Tensor:
        """lambda = log(alpha_t) - log(sigma_t) (+inf at sigma 0)."""
        alpha, sigma_t = self.alpha_sigma(sigma)
        return torch.log(alpha) - torch.log(sigma_t)

    # DPM-TRAJ: data prediction ---------------------------------------------------------------
    def data_prediction(self, model_output: torch.Tensor, sample: torch.Tensor, sigma) -> torch.Tensor:
        """x0 from the model output: epsilon (x - sigma_t eps)/alpha_t; sample m; v alpha_t x - sigma_t v;
        flow x - sigma v."""
        kind = self.config.prediction_type
        alpha_t, sigma_t = self.alpha_sigma(sigma)
        if kind == "epsilon":
            return (sample - sigma_t * model_output) / alpha_t
        if kind == "sample":
            return model_output
        if kind == "v_prediction":
            return alpha_t * sample - sigma_t * model_output
        return sample - sigma * model_output  # flow_prediction: the schedule sigma itself

    # DPM-ORDER ---------------------------------------------------------------------------------
    def order_for_step(self, index: int) -> int:
        """The order used at step ``index``: limited by the history, lowered at the end."""
        cfg, n = self.config, len(self.timesteps)
        short = cfg.lower_order_final and n < LOWER_ORDER_FINAL_BELOW
        if index == n - 1 and (cfg.euler_at_final or short or cfg.final_sigmas_type == "zero"):
            return 1
        order = min(cfg.solver_order, self._lower_order_nums + 1)
        if index == n - 2 and short:
            order = min(order, 2)
        return order

    # DPM-TRAJ: the updates -----------------------------------------------------------------------
    def update_coefficients(self, order: int, index: int) -> tuple[float, list[float], float]:
        """(a, [c_0 .. c_{order-1}], b) with x_t = a x + sum_j c_j m_j + b z for the step from
        sigmas[index] to sigmas[index + 1]; m_0 is the newest data prediction, z the noise.

        With h = lambda_t - lambda_s0, r_k = (lambda_sk - lambda_s(k+1)) / h,
        D1_0 = (m0 - m1)/r0, D1_1 = (m1 - m2)/r1 (Lu et al. 2022, DPM-Solver++(2M)/(3M)):
        ODE:  x_t = (sigma_t/sigma_s0) x + alpha_t (1 - e^-h) m0 + alpha_t C1 D1 + alpha_t C2 D2
        SDE:  x_t = (sigma_t/sigma_s0) e^-h x + alpha_t (1 - e^-2h) m0 + alpha_t C1 D1 + alpha_t C2 D2
              + sigma_t sqrt(1 - e^-2h) z
        order 2: D1 = D1_0; C1 = (1 - e^-h)/2 (midpoint) or (e^-h - 1)/h + 1 (heun); SDE: (1 - e^-2h)/2
        or (1 - e^-2h)/(-2h) + 1. order 3: D1 = D1_0 + r0/(r0+r1) (D1_0 - D1_1),
        D2 = (D1_0 - D1_1)/(r0+r1), C1 as heun, C2 = 0.5 - (e^-h - 1 + h)/h^2 (ODE) or DPM-SDE3.
        At a zero final sigma lambda_t = +inf, e^-h = 0 and order 1 gives x0 exactly; a higher order
        divides by r0 = 0 (inf/NaN), which is why DPM-ORDER lowers that step.
        """
        sigma_t = self.sigmas[index + 1]
        alpha_t, s_t = self.alpha_sigma(sigma_t)
        lam = [self.log_snr(self.sigmas[index - j]) for j in range(order)]  # lambda_s0, s1, s2
        _, s_s0 = self.alpha_sigma(self.sigmas[index])
        sde = self.config.algorithm_type in SDE_ALGORITHMS
        h = self.log_snr(sigma_t) - lam[0]
        e, e2 = torch.exp(-h), torch.exp(-2.0 * h)
        if sde:
            a, c, b = (s_t / s_s0) * e, [alpha_t * (1.0 - e2)], s_t * torch.sqrt(1.0 - e2)
        else:
            a, c, b = s_t / s_s0, [alpha_t * (1.0 - e)], torch.zeros(())
        if order == 1:
            return float(a), [float(v) for v in c], float(b)
        heun_c1 = (1.0 - e2) / (-2.0 * h) + 1.0 if sde else (e - 1.0) / h + 1.0
        r0 = (lam[0] - lam[1]) / h
        if order == 2:
            if self.config.solver_type == "midpoint":
                c1 = 0.5 * (1.0 - (e2 if sde else e))
            else:  # heun: the exact integral of a data prediction linear in lambda
                c1 = heun_c1
            k = alpha_t * c1 / r0  # alpha_t C1 (m0 - m1) / r0
            return float(a), [float(c[0] + k), float(-k)], float(b)
        r1 = (lam[1] - lam[2]) / h
        c2 = sde_third_order_d2_coefficient(h) if sde else 0.5 - (e - 1.0 + h) / h**2  # -phi_3
        p, q = r0 / (r0 + r1), 1.0 / (r0 + r1)
        big_a = alpha_t * (heun_c1 * (1.0 + p) + c2 * q)  # multiplies D1_0
        big_b = alpha_t * (heun_c1 * p + c2 * q)  # multiplies -D1_1
        coeffs = [c[0] + big_a / r0, -big_a / r0 - big_b / r1, big_b / r1]
        return float(a), [float(v) for v in coeffs], float(b)

    # DPM-SIGNATURE / DPM-NOISE / DPM-RETURN ------------------------------------------------------
    def _locate(self, timestep) -> int:
        """The first step finds its index in ``timesteps`` (the second match if it occurs twice);
        later steps must be given ``timesteps[index]``."""
        if isinstance(timestep, torch.Tensor):
            if timestep.numel() != 1:
                raise ValueError(f"timestep must be a scalar, got shape {tuple(timestep.shape)}")
            timestep = timestep.item()
        if isinstance(timestep, float) and timestep.is_integer():
            timestep = int(timestep)
        schedule = self.timesteps.tolist()
        if self._step_index is None:
            matches = [i for i, t in enumerate(schedule) if t == timestep]
            if not matches:
                raise ValueError(f"timestep {timestep!r} is not in the schedule {schedule}")
            return matches[1] if len(matches) > 1 else matches[0]
        index = self._step_index
        if index >= len(schedule):
            raise ValueError(f"step() called after the last of the {len(schedule)} timesteps")
        if schedule[index] != timestep:
            raise ValueError(f"timestep {timestep!r} is not the next in the schedule ({schedule[index]})")
        return index

    def step(
        self,
        model_output: torch.Tensor,
        timestep,
        sample: torch.Tensor,
        generator: torch.Generator | None = None,
        variance_noise: torch.Tensor | None = None,
        return_dict: bool = True,
    ):
        """One solver step from ``timestep`` to the next schedule point; float64 on model_output's device."""
        if self.timesteps is None:
            raise ValueError("step() called before set_timesteps(): num_inference_steps is unknown")
        require_floating(model_output, "model_output")
        require_floating(sample, "sample")
        if model_output.shape != sample.shape:
            raise ValueError(
                f"model_output shape {tuple(model_output.shape)} must equal "
                f"sample shape {tuple(sample.shape)}"
            )
        index = self._locate(timestep)
        device = model_output.device
        sde = self.config.algorithm_type in SDE_ALGORITHMS
        noise = None
        if sde:
            noise = self.draw_noise(model_output, generator, variance_noise)
        elif variance_noise is not None:
            require_floating(variance_noise, "variance_noise")
        x = sample.detach().to("cpu", torch.float64)
        x0 = self.data_prediction(model_output.detach().to("cpu", torch.float64), x, self.sigmas[index])
        self._history = [*self._history, x0][-self.config.solver_order :]
        self._step_index = index
        a, coeffs, b = self.update_coefficients(self.order_for_step(index), index)
        prev = a * x + sum(c * m for c, m in zip(coeffs, reversed(self._history), strict=False))
        if noise is not None:
            prev = prev + b * noise
        self._lower_order_nums = min(self._lower_order_nums + 1, self.config.solver_order)
        self._step_index = index + 1
        prev = prev.to(device)
        return StepOutput(prev_sample=prev) if return_dict else (prev,)

    @staticmethod
    def draw_noise(model_output, generator, variance_noise) -> torch.Tensor:
        """DPM-NOISE: ``variance_noise`` when given, else float32 randn of the output's shape drawn from
        ``generator`` (on the generator's device, or the output's device without one)."""
        if variance_noise is not None:
            require_floating(variance_noise, "variance_noise")
            if variance_noise.shape != model_output.shape:
                raise ValueError(
                    f"variance_noise shape {tuple(variance_noise.shape)} must equal model_output shape "
                    f"{tuple(model_output.shape)}"
                )
            return variance_noise.detach().to("cpu", torch.float64)
        where = generator.device if generator is not None else model_output.device
        z = torch.randn(model_output.shape, generator=generator, device=where, dtype=torch.float32)
        return z.to("cpu", torch.float64)

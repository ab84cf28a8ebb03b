"""Scheduler mutants: the SANA scheduler regression (spec/scheduler.md, DPM-SIGNATURE) and its neighbours.

Each is a serving-framework port: a wrapper around a DPM-Solver++ implementation (here the
float64 oracle, cast to the model dtype, so the only defect is the one described) that gets one
thing wrong. None needs diffusers.
"""

from __future__ import annotations

from mutants._scheduler_port import MutantBackend, PortedScheduler
from mutants._scheduler_ranges import BACKENDS as RANGE_BACKENDS
from reference.scheduler import DPMSolverMultistep, StepOutput

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_scheduler"]


class KwargsWrapper(PortedScheduler):
    """step(model_output, timestep, sample, **kwargs) forwarding every keyword to the inner scheduler.

    Origin: the SANA GPU wrapper; a caller filtering by inspect.signature passed `eta` through and
    the inner step raised TypeError (spec/scheduler.md, DPM-SIGNATURE).
    Caught by: DPM-SIGNATURE.
    """

    clauses = {"DPM-SIGNATURE"}

    def step(self, model_output, timestep, sample, **kwargs):
        return self.inner_step(model_output, timestep, sample, **kwargs)

    def inner_step(
        self, model_output, timestep, sample, generator=None, variance_noise=None, return_dict=True
    ):  # noqa: E501
        return PortedScheduler.step(
            self, model_output, timestep, sample, generator, variance_noise, return_dict
        )


class VarianceNoiseDropped(PortedScheduler):
    """variance_noise not forwarded: the SDE step draws its own noise from the generator.

    Origin: a wrapper that forwards only the arguments its author knew about (generator).
    Caught by: DPM-NOISE.
    """

    clauses = {"DPM-NOISE"}

    def step(self, model_output, timestep, sample, generator=None, variance_noise=None, return_dict=True):
        return super().step(model_output, timestep, sample, generator, None, return_dict)


class ReturnDictIgnored(PortedScheduler):
    """return_dict ignored: always returns the output object.

    Origin: a wrapper that hard-codes return_dict=True when calling the inner scheduler.
    Caught by: DPM-RETURN, DPM-SIGNATURE.
    """

    clauses = {"DPM-RETURN", "DPM-SIGNATURE"}

    def step(self, model_output, timestep, sample, generator=None, variance_noise=None, return_dict=True):
        return super().step(model_output, timestep, sample, generator, variance_noise, True)


class HeunForMidpoint(PortedScheduler):
    """solver_type heun used when midpoint is configured.

    Origin: a port that builds its solver from a preset instead of the model's scheduler config.
    Caught by: DPM-TRAJ.
    """

    clauses = {"DPM-TRAJ"}

    def make_inner(self, config):
        return DPMSolverMultistep(**{**config, "solver_type": "heun"})


class FlowShiftIgnored(PortedScheduler):
    """flow_shift not applied (shift 1.0 used): SANA's sigmas are unshifted.

    Origin: a port that forwards use_flow_sigmas but drops flow_shift from the config.
    Caught by: DPM-TIMESTEPS, DPM-TRAJ.
    """

    clauses = {"DPM-TIMESTEPS", "DPM-TRAJ"}

    def make_inner(self, config):
        return DPMSolverMultistep(**{**config, "flow_shift": 1.0})


class _NeverLowered(DPMSolverMultistep):
    def order_for_step(self, index):
        return min(self.config.solver_order, self._lower_order_nums + 1)


class FinalStepNotLowered(PortedScheduler):
    """The final step not lowered to first order (lower_order_final / zero final sigma ignored).

    Origin: a hand port of the multistep loop without the "improve stability for few steps" rule;
    with a zero final sigma the second-order step divides by r0 = 0.
    Caught by: DPM-TRAJ.
    """

    clauses = {"DPM-TRAJ"}

    def make_inner(self, config):
        return _NeverLowered(**config)


BACKENDS = [
    MutantBackend("wrong-step-kwargs-wrapper", KwargsWrapper),
    MutantBackend("wrong-variance-noise-dropped", VarianceNoiseDropped),
    MutantBackend("wrong-return-dict-ignored", ReturnDictIgnored),
    MutantBackend("wrong-heun-for-midpoint", HeunForMidpoint),
    MutantBackend("wrong-flow-shift-ignored", FlowShiftIgnored),
    MutantBackend("wrong-final-step-not-lowered", FinalStepNotLowered),
]


class FinalSigmaSigmaMin(PortedScheduler):
    """final_sigmas_type "zero" replaced by "sigma_min": the last step stops short of sigma 0.

    Origin: a port that drops final_sigmas_type when forwarding the config, so an older
    checkpoint config's "sigma_min" (or a hard-coded default) wins.
    Caught by: DPM-TIMESTEPS, DPM-TRAJ.
    """

    clauses = {"DPM-TIMESTEPS", "DPM-TRAJ"}

    def make_inner(self, config):
        return DPMSolverMultistep(**{**config, "final_sigmas_type": "sigma_min"})


class OutputLeftInFloat32(PortedScheduler):
    """prev_sample returned in float32, the dtype of the update, not the model output's dtype.

    Origin: the fp32 upcast of the sample for the update without the final cast back.
    Caught by: DPM-TRAJ.
    """

    clauses = {"DPM-TRAJ"}

    def step(self, model_output, timestep, sample, generator=None, variance_noise=None, return_dict=True):
        out = self.inner.step(model_output, timestep, sample, generator, variance_noise, True)
        prev = out.prev_sample.float()
        return StepOutput(prev_sample=prev) if return_dict else (prev,)


BACKENDS += [
    MutantBackend("wrong-final-sigma-sigma-min", FinalSigmaSigmaMin),
    MutantBackend("wrong-output-left-in-float32", OutputLeftInFloat32),
]


class BetaScheduleDefaultScaledLinear(PortedScheduler):
    """beta_schedule defaults to "scaled_linear" when the config leaves it out (diffusers: "linear").

    Origin: the SANA port's scheduler wrapper declared its own constructor defaults
    (``beta_schedule="scaled_linear"``, the Stable Diffusion value) instead of the wrapped
    ``DPMSolverMultistepScheduler``'s, so a config without the key gets other VP sigmas from the
    very first step (spec/scheduler.md, DPM-CONSTRUCT).
    Caught by: DPM-CONSTRUCT.
    """

    clauses = {"DPM-CONSTRUCT"}

    def make_inner(self, config):
        return DPMSolverMultistep(**{"beta_schedule": "scaled_linear", **config})


class _UncheckedFlowShift(DPMSolverMultistep):
    """The oracle holding whatever flow_shift it is given, unchecked, as diffusers 0.42 does."""

    def __init__(self, *, flow_shift, **config):
        super().__init__(**config)
        object.__setattr__(self.config, "flow_shift", flow_shift)


class FlowShiftNoneDefault(PortedScheduler):
    """flow_shift defaults to None when the config leaves it out (diffusers: 1.0).

    Origin: the same SANA wrapper's ``flow_shift=None`` default, forwarded to the inner scheduler;
    diffusers 0.42 accepts None and then raises ``TypeError`` in ``set_timesteps`` with
    ``use_flow_sigmas=True`` (None * sigmas), which this reproduces (spec/scheduler.md, DPM-CONSTRUCT).
    Caught by: DPM-CONSTRUCT.
    """

    clauses = {"DPM-CONSTRUCT"}

    def make_inner(self, config):
        return _UncheckedFlowShift(**{"flow_shift": None, **config})


BACKENDS += [
    MutantBackend("wrong-beta-schedule-default", BetaScheduleDefaultScaledLinear),
    MutantBackend("wrong-flow-shift-none-default", FlowShiftNoneDefault),
]

BACKENDS += (
    RANGE_BACKENDS  # wrong only at a threshold or a key without its switch (spec/scheduler.md, Ranges)
)

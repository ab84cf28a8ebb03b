"""The scheduler mutants' base: a correct port of the oracle and the backend that builds a mutant's
port (``mutants/scheduler.py``, ``mutants/_scheduler_ranges.py``)."""

from __future__ import annotations

import torch

from reference.scheduler import DPMSolverMultistep, StepOutput


class PortedScheduler:
    """A correct port: the oracle's arithmetic, outputs cast to the model output's dtype."""

    def __init__(self, **config):
        self.inner = self.make_inner(config)

    def make_inner(self, config: dict) -> DPMSolverMultistep:
        return DPMSolverMultistep(**config)

    def set_timesteps(self, num_inference_steps, device=None):
        self.inner.set_timesteps(num_inference_steps, device=device)

    @property
    def timesteps(self):
        return self.inner.timesteps

    @property
    def sigmas(self):
        return self.inner.sigmas.float()

    def step(self, model_output, timestep, sample, generator=None, variance_noise=None, return_dict=True):
        out = self.inner.step(model_output, timestep, sample, generator, variance_noise, True)
        prev = out.prev_sample.to(model_output.dtype)
        return StepOutput(prev_sample=prev) if return_dict else (prev,)


class MutantBackend:
    def __init__(self, name: str, scheduler_class):
        self.name = name
        self.scheduler_class = scheduler_class
        self.clauses = scheduler_class.clauses
        self.__doc__ = scheduler_class.__doc__

    def unavailable(self, device: torch.device) -> str | None:
        return None

    def dpm_scheduler(self, **config):
        return self.scheduler_class(**config)

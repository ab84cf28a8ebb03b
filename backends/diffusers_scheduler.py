"""The ``diffusers`` and ``diffusers-wrapped`` backends of the scheduler op ``dpm_scheduler``.

``diffusers``: diffusers' own ``DPMSolverMultistepScheduler``. ``diffusers-wrapped``: the
serving-framework pattern (spec/scheduler.md, DPM-SIGNATURE), a wrapper that owns a diffusers scheduler,
proxies ``set_timesteps``, ``timesteps`` and ``sigmas``, and exposes the explicit step signature
(DPM-SIGNATURE), forwarding exactly the declared arguments. diffusers is imported lazily:
without it both backends are unavailable, with the reason.
"""

from __future__ import annotations

import importlib

import torch

# DPM-SDE3: diffusers 0.42's third-order sde-dpmsolver++ step uses (1 - e^-2h - 2h)/(2h)^2 - 0.5
# for D2, where the derivation gives + 0.5 (spec/scheduler.md). Both backends fail that clause;
# the failure is declared, as a bug, in expectations/diffusers.toml and diffusers-wrapped.toml.


def _diffusers_scheduler_class():
    return importlib.import_module("diffusers").DPMSolverMultistepScheduler


def _diffusers_missing() -> str | None:
    try:
        _diffusers_scheduler_class()
    except Exception as exc:  # ImportError, or a broken install raising at import
        return f"diffusers is not installed or failed to import ({type(exc).__name__}: {exc})"
    return None


class WrappedDPMScheduler:
    """A wrapper owning a diffusers scheduler, with the explicit step signature (the SANA fix)."""

    def __init__(self, **config):
        self.inner = _diffusers_scheduler_class()(**config)

    def set_timesteps(self, num_inference_steps: int, device: torch.device | str | None = None) -> None:
        self.inner.set_timesteps(num_inference_steps, device=device)

    @property
    def timesteps(self) -> torch.Tensor:
        return self.inner.timesteps

    @property
    def sigmas(self) -> torch.Tensor:
        return self.inner.sigmas

    def step(
        self,
        model_output: torch.Tensor,
        timestep,
        sample: torch.Tensor,
        generator: torch.Generator | None = None,
        variance_noise: torch.Tensor | None = None,
        return_dict: bool = True,
    ):
        return self.inner.step(
            model_output,
            timestep,
            sample,
            generator=generator,
            variance_noise=variance_noise,
            return_dict=return_dict,
        )


class DiffusersSchedulerBackend:
    """``dpm_scheduler(**config)`` builds diffusers' scheduler, bare or wrapped."""

    def __init__(self, name: str, *, wrapped: bool):
        self.name = name
        self.wrapped = wrapped

    def unavailable(self, device: torch.device) -> str | None:
        return _diffusers_missing()

    def dpm_scheduler(self, **config):
        if self.wrapped:
            return WrappedDPMScheduler(**config)
        return _diffusers_scheduler_class()(**config)


BACKEND = DiffusersSchedulerBackend("diffusers", wrapped=False)
WRAPPED = DiffusersSchedulerBackend("diffusers-wrapped", wrapped=True)

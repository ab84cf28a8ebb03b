"""Scheduler mutants wrong only where the draws or checks once never went (spec/scheduler.md, Ranges;
listed by ``mutants/scheduler.py``): DPM-ORDER's threshold at 15 steps, flow_shift given without
use_flow_sigmas, float timesteps. Each conformed while no schedule of 15 steps met the context where
the threshold shows, flow_shift was 1.0 whenever use_flow_sigmas was off, and the timesteps were
compared as numbers; each docstring says the bug, its origin and the clauses that catch it.
"""

from __future__ import annotations

from mutants._scheduler_port import MutantBackend, PortedScheduler
from reference import scheduler as oracle


class _LowersAtFifteen(oracle.DPMSolverMultistep):
    def order_for_step(self, index):
        n = len(self.timesteps)
        if self.config.lower_order_final and n == oracle.LOWER_ORDER_FINAL_BELOW:  # "<=" for "<"
            if index == n - 1:
                return 1
            if index == n - 2:
                return min(super().order_for_step(index), 2)
        return super().order_for_step(index)


class LowerOrderFinalAtFifteen(PortedScheduler):
    """lower_order_final applied to schedules of up to 15 steps (``<=`` where diffusers has ``<``):
    at exactly 15 steps the last two steps are lowered.

    Origin: an off-by-one at DPM-ORDER's threshold (diffusers' ``len(self.timesteps) < 15``); the
    draws never ran 15 steps at third order or with a nonzero final sigma, where it shows.
    Caught by: DPM-TRAJ, DPM-ORDER.
    """

    clauses = {"DPM-TRAJ", "DPM-ORDER"}

    def make_inner(self, config):
        return _LowersAtFifteen(**config)


class FlowSigmasFromShift(PortedScheduler):
    """use_flow_sigmas switched on whenever flow_shift is given other than 1.0: the switch inferred
    from its key, so a VP config carrying a shift gets flow sigmas.

    Origin: a SANA port reading "a shift is given" as "flow matching"; diffusers uses flow_shift only
    under use_flow_sigmas, and the draws gave a shift only with use_flow_sigmas on.
    Caught by: DPM-TIMESTEPS, DPM-TRAJ.
    """

    clauses = {"DPM-TIMESTEPS", "DPM-TRAJ"}

    def make_inner(self, config):
        if config.get("flow_shift", 1.0) != 1.0:
            config = {**config, "use_flow_sigmas": True}
        return oracle.DPMSolverMultistep(**config)


class TimestepsAsFloat(PortedScheduler):
    """The timesteps handed back as float32 (the values right): DPM-TIMESTEPS names int64.

    Origin: a port building the schedule with ``torch.linspace`` and never casting it; the check
    compared the timesteps as a list of numbers, where 999.0 equals 999 (rule 3: no comparison
    discards a dtype a clause names).
    Caught by: DPM-TIMESTEPS.
    """

    clauses = {"DPM-TIMESTEPS"}

    @property
    def timesteps(self):
        return self.inner.timesteps.float()


BACKENDS = [
    MutantBackend("wrong-lower-order-final-at-15", LowerOrderFinalAtFifteen),
    MutantBackend("wrong-flow-sigmas-from-shift", FlowSigmasFromShift),
    MutantBackend("wrong-timesteps-as-float", TimestepsAsFloat),
]

"""The scheduler family's range rules (spec/scheduler.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, around, config_forms, past

LOWER_ORDER_FINAL_BELOW = 15  # reference.scheduler's threshold (DPM-ORDER)


def _setting(config: dict, key: str):
    from conformance.strategies.scheduler import DEFAULT_CONFIG

    return config.get(key, DEFAULT_CONFIG[key])


def _order_threshold_offset(arguments: dict):
    """n - 15 for a schedule of n steps where DPM-ORDER's threshold shows: lower_order_final on and a
    step it lowers that nothing else does (third order, or a nonzero final sigma)."""
    config, n = arguments["config"], arguments["num_inference_steps"]
    shows = _setting(config, "solver_order") == 3 or _setting(config, "final_sigmas_type") == "sigma_min"
    return n - LOWER_ORDER_FINAL_BELOW if _setting(config, "lower_order_final") and shows else None


def _config_form(arguments: dict):
    """Rule 5: flow_shift given without use_flow_sigmas on, use_flow_sigmas on without flow_shift."""
    forms = []
    shift, flow = arguments.get("flow_shift"), arguments.get("use_flow_sigmas", False)
    if shift not in (None, 1.0) and not flow:
        forms.append("flow_shift without use_flow_sigmas")
    if flow and "flow_shift" not in arguments:
        forms.append("use_flow_sigmas without flow_shift")
    return forms


STEPS = Measure("dpm_scheduler.set_timesteps", "steps", lambda a: a["num_inference_steps"])
ORDER_THRESHOLD = Measure("dpm_scheduler.set_timesteps", "steps - 15 (lower_order_final showing)",
                          _order_threshold_offset)  # fmt: skip
FORMS = Measure("dpm_scheduler", "config form", _config_form)

RULES = [
    past(STEPS, 25, "SANA's 20 steps and the usual 25 to 50"),
    around(ORDER_THRESHOLD, "DPM-ORDER: lower_order_final lowers the last steps below 15 steps"),
    config_forms(FORMS, "flow_shift without use_flow_sigmas", "use_flow_sigmas without flow_shift",
                 why="DPM-CONFIG: flow_shift acts only with use_flow_sigmas"),
]  # fmt: skip

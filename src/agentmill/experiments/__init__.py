"""The experiment registry: an explicit list of modules, each defining one module-level ``EXPERIMENT``.

Modules are imported on first use (so ``agentmill list`` never loads torch), and a duplicate id is an error.
To add an experiment: write ``e1xx_<slug>_<what>.py`` with ``EXPERIMENT = Experiment(...)`` and append its
module name to ``MODULES``.
"""

from __future__ import annotations

import difflib
from importlib import import_module

from agentmill.experiments.protocol import PROFILES, Claim, Experiment, RunContext

MODULES: tuple[str, ...] = (
    "agentmill.experiments.e162_collapse_law",
    "agentmill.experiments.e162_collapse_llm",
    "agentmill.experiments.e162_tree_synth",
    "agentmill.experiments.e162_greedy_submodular",
    "agentmill.experiments.e162_allocation_synth",
    "agentmill.experiments.e162_uucb_grid",
    "agentmill.experiments.e162_tree_llm",
    "agentmill.experiments.e163_maze_separation",
    "agentmill.experiments.e163_maze_distill",
    "agentmill.experiments.e163_maze_llm",
    "agentmill.experiments.e176_library",
    "agentmill.experiments.e176_gate",
    "agentmill.experiments.e176_recovery",
    "agentmill.experiments.e176_scoring",
    "agentmill.experiments.e176_resume",
    "agentmill.experiments.e176_sandbox",
    "agentmill.experiments.e176_strawman",
    "agentmill.experiments.e176_durability",
    "agentmill.experiments.e176_browser",
    "agentmill.experiments.e176_llm",
    "agentmill.experiments.e176_perf",
    "agentmill.experiments.e176_fixture",
    "agentmill.experiments.e179_markov_gain",
    "agentmill.experiments.e179_calibration",
    "agentmill.experiments.e179_sampling_equality",
    "agentmill.experiments.e179_speed_single_user",
    "agentmill.experiments.e179_load_vs_fixed",
    "agentmill.experiments.e179_server",
    "agentmill.experiments.e179_counterexample",
    "agentmill.experiments.e179_lossless_exact",
    "agentmill.experiments.e179_lossless_mc",
    "agentmill.experiments.e165_g2po_advantage_quality",
    "agentmill.experiments.e165_g2po_no_repeat_collapse",
    "agentmill.experiments.e165_g2po_value_variance",
    "agentmill.experiments.e165_g2po_td_covariance",
    "agentmill.experiments.e165_g2po_learning_keydoor",
    "agentmill.experiments.e165_g2po_overhead",
    "agentmill.experiments.e165_g2po_learning_textworld",
    "agentmill.experiments.e173_progress_exactness",
    "agentmill.experiments.e173_progress_reward_vs_advantage",
    "agentmill.experiments.e173_progress_token_telescoping",
    "agentmill.experiments.e173_progress_keydoor_grader",
    "agentmill.experiments.e173_progress_fluency_control",
    "agentmill.experiments.e173_progress_perf",
    "agentmill.experiments.e165_g2po_llm_advantage_quality",
    "agentmill.experiments.e173_progress_lm_pair_distilled",
    "agentmill.experiments.e173_progress_lm_pair_rl",
    "agentmill.experiments.e165_g2po_lora_smoke",
    "agentmill.experiments.e164_constraint_rot_mechanism",
    "agentmill.experiments.e164_constraint_rot_compression",
    "agentmill.experiments.e164_constraint_rot_organism",
    "agentmill.experiments.e164_constraint_rot_frameworks",
    "agentmill.experiments.e164_constraint_rot_crossing",
    "agentmill.experiments.e164_constraint_rot_instinct",
    "agentmill.experiments.e164_constraint_rot_attack_llm",
)

_registry: dict[str, Experiment] | None = None


class DuplicateExperimentError(ValueError):
    pass


def build_registry(modules: tuple[str, ...] = MODULES) -> dict[str, Experiment]:
    reg: dict[str, Experiment] = {}
    for name in modules:
        exp = getattr(import_module(name), "EXPERIMENT", None)
        if not isinstance(exp, Experiment):
            raise TypeError(f"{name} must define a module-level EXPERIMENT = Experiment(...)")
        if exp.id in reg:
            raise DuplicateExperimentError(f"experiment id {exp.id!r} is registered twice ({name})")
        reg[exp.id] = exp
    return reg


def registry() -> dict[str, Experiment]:
    global _registry
    if _registry is None:
        _registry = build_registry()
    return _registry


def get(exp_id: str) -> Experiment:
    """The experiment with id ``exp_id``; a typo fails with the closest ids."""
    reg = registry()
    if exp_id in reg:
        return reg[exp_id]
    close = difflib.get_close_matches(exp_id, list(reg), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise KeyError(f"no experiment {exp_id!r}.{hint} Run 'agentmill list' to see all ids.")


__all__ = ["Claim", "Experiment", "RunContext", "PROFILES", "registry", "get", "build_registry", "MODULES",
           "DuplicateExperimentError"]

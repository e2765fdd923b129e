"""First-token safety probes (E171): probes at named trace positions and layers with controls, prefix-freeze
resampling on forked KV caches, stance flips, the valley curve, defenses as two-axis arms, and the tiny refusal
organisms (docs/methods/first_token_probe.md)."""

from agentmill.methods.first_token_probe.config import FreezeConfig, OrganismConfig, ProbeConfig
from agentmill.methods.first_token_probe.core import organism_rollouts, probe_study
from agentmill.methods.first_token_probe.defenses import compare_arm, make_arm
from agentmill.methods.first_token_probe.freeze import prefix_freeze
from agentmill.methods.first_token_probe.organism import load_organism, train_organism, validate_organism
from agentmill.methods.first_token_probe.probes import DegenerateLabels, fit_probes
from agentmill.methods.first_token_probe.prompts import sample_prompts
from agentmill.methods.first_token_probe.sampling import sample_rollouts
from agentmill.methods.first_token_probe.synthetic import SyntheticTwin
from agentmill.methods.first_token_probe.valley import valley_depth

__all__ = ["DegenerateLabels", "FreezeConfig", "OrganismConfig", "ProbeConfig", "SyntheticTwin", "compare_arm",
           "fit_probes", "load_organism", "make_arm", "organism_rollouts", "prefix_freeze", "probe_study",
           "sample_prompts", "sample_rollouts", "train_organism", "valley_depth", "validate_organism"]

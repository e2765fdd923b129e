"""Cliff tokens (E172): the potential of a reasoning trace by forked rollouts, an exact one-sided cliff test, a
cliff taxonomy, replication and causal interventions, one-token preference pairs and DPO with a compute ledger,
and a planted-cliff chained-addition task with an exact oracle (docs/methods/cliff_tokens.md)."""

from agentmill.methods.cliff_tokens.bisect import bisect_drops
from agentmill.methods.cliff_tokens.chainadd import ChainRecipe, chain_gate, obtain_chainadd, train_chainadd
from agentmill.methods.cliff_tokens.cliff_dpo import (DPOLedger, TrajectoryPair, cliffs_of_trace, train_trajectory_dpo,
                                                      trajectory_pairs)
from agentmill.methods.cliff_tokens.core import CliffConfig, chainadd_verifier, oracle_study, study_trace
from agentmill.methods.cliff_tokens.dpo import (ComputeLedger, DPOConfig, single_token_dpo_loss, train_dpo,
                                                trajectory_dpo_loss)
from agentmill.methods.cliff_tokens.interventions import (ban_resample, delete_resample, force_candidates,
                                                          keep_resample, pass_at_k)
from agentmill.methods.cliff_tokens.pairs import TokenPair, build_pairs
from agentmill.methods.cliff_tokens.planted import ChainAddOracle
from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator, PotentialTrace
from agentmill.methods.cliff_tokens.replication import replicate
from agentmill.methods.cliff_tokens.taxonomy import classify
from agentmill.methods.cliff_tokens.ztest import (Cliff, CliffTest, cliff_matrix, detect, expected_false_cliffs,
                                                  null_fp_rate, power)

__all__ = ["ChainAddOracle", "ChainRecipe", "DPOLedger", "TrajectoryPair", "chain_gate", "cliffs_of_trace",
           "obtain_chainadd", "train_chainadd", "train_trajectory_dpo", "trajectory_pairs", "bisect_drops", "Cliff", "CliffConfig", "CliffTest", "ComputeLedger", "DPOConfig", "PotentialConfig",
           "PotentialEstimator", "PotentialTrace", "TokenPair", "ban_resample", "build_pairs", "chainadd_verifier",
           "classify", "cliff_matrix", "delete_resample", "detect", "expected_false_cliffs", "force_candidates",
           "keep_resample", "null_fp_rate", "oracle_study", "pass_at_k", "power", "replicate",
           "single_token_dpo_loss", "study_trace", "train_dpo", "trajectory_dpo_loss"]

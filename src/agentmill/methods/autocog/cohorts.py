"""Where real data come from (spec autocog §6.2): a hidden ground-truth theory, or the web store's participants."""

from __future__ import annotations

import numpy as np

from agentmill.core.seeding import derive_seed, rng_for
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.simulate import Data, simulate


class SimulatedCohort:
    """Participants drawn from a hidden ground truth with action noise ε_gt (§2.3). ``permute`` (NC-2) shuffles
    each subject's responses across trials, keeping choice rates but breaking the stimulus-choice link."""

    kind = "simulated"

    def __init__(self, ground_truth, *, action_noise: float = 0.0, seed: int = 0, permute: bool = False) -> None:
        self.ground_truth, self.action_noise, self.seed, self.permute = ground_truth, action_noise, seed, permute

    def describe(self) -> dict:
        # Only what the audit needs; never the GT's name/prose in anything a role sees (pitfall 22).
        return {"kind": self.kind, "gt_id": self.ground_truth.content_id, "action_noise": self.action_noise,
                "seed": self.seed, "permute": self.permute}

    def collect(self, obs_id: str, design: Design, n: int) -> Data | None:
        d = simulate(self.ground_truth, design, n, (derive_seed(self.seed, "cohort", obs_id),),
                     action_noise=self.action_noise)
        if self.permute:
            d.resp = rng_for(self.seed, "permute", obs_id).permuted(d.resp, axis=1)
        d.prob_a = None
        return d


class HumanCohort:
    """Participants from the web app's SQLite store: data are ready once ``target_valid_n`` valid (non-excluded)
    completed sessions exist for the observation; until then ``collect`` returns None (the loop pauses)."""

    kind = "human"

    def __init__(self, store, *, target_valid_n: int = 25) -> None:
        self.store, self.target_valid_n = store, target_valid_n

    def describe(self) -> dict:
        return {"kind": self.kind, "db": str(self.store.path), "target_valid_n": self.target_valid_n}

    def request(self, obs_id: str, design: Design) -> None:
        self.store.add_observation(obs_id, design.to_json())

    def collect(self, obs_id: str, design: Design, n: int) -> Data | None:
        from agentmill.methods.autocog.web.exclusion import valid_data

        self.request(obs_id, design)
        subj = valid_data(self.store, obs_id)
        if len(subj) < self.target_valid_n:
            return None
        subj = subj[: self.target_valid_n]
        T = min(len(s["pair_idx"]) for s in subj)
        return Data(design, np.array([s["pair_idx"][:T] for s in subj]), np.array([s["resp"][:T] for s in subj]))

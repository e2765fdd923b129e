"""Where real data come from [R]: a hidden ground-truth theory, the web store's participants, or
the vendored human observations replayed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agentmill.core.seeding import derive_seed, rng_for
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.fixtures import RUNS, load_run, read_rows, verify_fixture
from agentmill.methods.autocog.simulate import Data, simulate


class SimulatedCohort:
    """Participants drawn from a hidden ground truth with action noise ε_gt [R]. ``permute`` (NC-2) shuffles
    each subject's responses across trials, keeping choice rates but breaking the stimulus-choice link."""

    kind = "simulated"

    def __init__(self, ground_truth, *, action_noise: float = 0.0, seed: int = 0, permute: bool = False) -> None:
        self.ground_truth, self.action_noise, self.seed, self.permute = ground_truth, action_noise, seed, permute

    def describe(self) -> dict:
        # Only what the audit needs; never the GT's name/prose in anything a role sees [R].
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


@dataclass(frozen=True)
class ReplayObservation:
    """One committed human observation (human replay [R]). ``rows``: the canonical file's rows in file order, exactly
    what the committed metric saw (``real_value``). ``data``: the participants whose every trial is a pair of this
    observation's design, as :class:`Data` (pair index per trial, first ``design.n_trials`` trials); the others are
    listed in ``off_design_subjects`` (the cardinal run's round 2-4 files mix in participants who were shown the
    sibling observation's pairs [D, 2026-11-25])."""

    obs_id: str
    run: str
    design: Design
    rows: list = field(repr=False)
    data: Data = field(repr=False)
    off_design_subjects: tuple
    metric_source: str = field(repr=False)
    real_value: float | None
    real_variance: float | None
    predicted_values: dict = field(repr=False)


def _design_of(experiment: dict, where: str) -> Design:
    try:
        return Design.make(experiment["validities"], experiment["trial_a_ratings"], experiment["trial_b_ratings"],
                           experiment.get("rating_max", 1), rationale=experiment.get("rationale") or "")
    except KeyError as e:
        raise ValueError(f"{where}: experiment field {e.args[0]!r} missing") from None


def _on_design_data(design: Design, rows: list[dict]) -> tuple[Data, tuple]:
    """Rows -> Data for the subjects (in order of first appearance) whose trials are all (A, B) pairs of ``design``
    and number at least ``design.n_trials``; the rest are returned as off-design subject ids."""
    index = {(a, b): u for u, (a, b) in enumerate(zip(design.pairs_a, design.pairs_b))}
    by: dict = {}
    for r in rows:
        by.setdefault(r["subject_id"], []).append(r)
    pair_rows, resp_rows, off = [], [], []
    for sid, rr in by.items():
        idx = [index.get((tuple(r["option_a_ratings"]), tuple(r["option_b_ratings"]))) for r in rr]
        if None in idx or len(idx) < design.n_trials:
            off.append(sid)
            continue
        pair_rows.append(idx[: design.n_trials])
        resp_rows.append([int(r["response"]) for r in rr[: design.n_trials]])
    T = design.n_trials
    return (Data(design, np.asarray(pair_rows, int).reshape(-1, T), np.asarray(resp_rows, int).reshape(-1, T)),
            tuple(off))


class ReplayCohort:
    """The vendored human observations served as a cohort: ``collect`` returns the committed
    participants of the observation with the same id (``"<run>/<obs_id>"``) or, for the loop's own ids, the same
    design (content id); any other design has no human data and stays pending (None), as a human cohort would.
    ``observations`` also carries each observation's rows, committed metric source and real value so library
    theories can be re-scored on the human data (``predict``)."""

    kind = "replay"

    def __init__(self, root: Path | str, runs: tuple[str, ...] = RUNS, *, verify: bool = True) -> None:
        root = Path(root)
        if verify and (problems := verify_fixture(root)):
            raise ValueError(f"fixture {root}: integrity check failed: {problems[0]}"
                             + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
        self.root, self.runs = root, tuple(runs)
        self.observations: list[ReplayObservation] = []
        for run in self.runs:
            obs, _ = load_run(root, run)
            for o in obs["observations"]:
                where = f"fixture {root / run}: observation {o.get('obs_id')!r}"
                design = _design_of(o.get("experiment") or {}, where)
                rows = read_rows(root / run / o["data_path"])
                data, off = _on_design_data(design, rows)
                self.observations.append(ReplayObservation(
                    f"{run}/{o['obs_id']}", run, design, rows, data, off, o["metric"]["metric_source"],
                    o.get("real_value"), o.get("real_variance"), dict(o.get("predicted_values") or {})))
        self._by_id = {o.obs_id: o for o in self.observations}
        self._by_design = {}
        for o in self.observations:
            self._by_design.setdefault(o.design.content_id(), o)

    def describe(self) -> dict:
        from agentmill.methods.autocog.fixtures import load_manifest

        return {"kind": self.kind, "root": str(self.root), "runs": list(self.runs),
                "commit": load_manifest(self.root).get("commit"), "n_obs": len(self.observations)}

    def observation(self, obs_id: str) -> ReplayObservation:
        if obs_id not in self._by_id:
            raise ValueError(f"unknown replay observation {obs_id!r}; known: {', '.join(self._by_id)}")
        return self._by_id[obs_id]

    def collect(self, obs_id: str, design: Design, n: int) -> Data | None:
        o = self._by_id.get(obs_id) or self._by_design.get(design.content_id())
        if o is None:
            return None
        return Data(o.design, o.data.pair_idx[:n], o.data.resp[:n])

    def predict(self, theory, obs: ReplayObservation, *, n_sim: int = 50, seed: int = 0,
                metric=None) -> float | None:
        """``theory``'s predicted value on ``obs``: ``n_sim`` simulated subjects on the observation's design (common
        random numbers keyed by ``seed`` and the observation id), scored with the committed metric source (run
        unchanged in the sandbox, :mod:`frame_metric`) or, when given, a template ``metric``. None when the theory
        or the metric fails (scored as missing [C])."""
        from agentmill.methods.autocog.frame_metric import run_frame_metric
        from agentmill.methods.autocog.sandbox import SandboxError

        try:
            sim = simulate(theory, obs.design, n_sim, (derive_seed(seed, "replay", obs.obs_id),))
        except (SandboxError, ValueError):
            return None
        if metric is not None:
            return metric(sim).value
        try:
            return run_frame_metric(obs.metric_source, sim.to_rows())["value"]
        except SandboxError:
            return None

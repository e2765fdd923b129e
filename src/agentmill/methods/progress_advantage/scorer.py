"""The progress-advantage scorer over any two language models of the lm layer (arXiv:2606.26080; README deviations 1-9).

A step score is A_t = β·log(π_θ(a_t|s_t)/π_ref(a_t|s_t)), read off one forward pass of each model over the whole
episode (:func:`agentmill.lm.scoring.score_segments`). The pair can be two ``hf:`` models, two ``tiny:`` models, a
LoRA copy and its base, or the canned scripted fakes in tests; anything that can score given tokens.

Scoring steps (README deviations 1-8): render the episode as the policy saw it (:class:`Episode`: prefer recorded token
ids), score each model once, slice out the action spans (each action followed by its end-of-turn marker), and combine
token log-probs with the configured aggregation and ratio mode; with ``action_space="candidates"`` every admissible
candidate is scored in the same context and the log-probs are renormalised over the set.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.core.types import Trajectory
from agentmill.lm.scoring import SegmentScores, score_segments_batch, tokenizer_fingerprint
from agentmill.methods.progress_advantage.config import PAConfig
from agentmill.methods.progress_advantage.core import (aggregate_steps, aggregate_tokens, candidate_step_score,
                                                       step_score)

RENDERER_VERSION = "plain/1"
"""Version of :meth:`Episode.from_trajectory`'s text layout; recorded with every score (a score file must not be
re-used with another renderer)."""


@dataclass(frozen=True)
class Episode:
    """An episode rendered for scoring: ``segments`` in order, which of them are actions, and the admissible sets.

    ``segments`` are all text or all token-id tuples (recorded at rollout time — preferred, since re-tokenizing
    can cut text differently than generation did). ``end_of_turn`` (text or ids) follows every action and every
    candidate and is scored as part of the action: "go north" must not be a free prefix of "go north east", and a
    free-text policy's probability of stopping is part of its action. ``candidates`` has one entry per action (in
    order): the admissible set at that step (it must contain the action taken), or None.
    """

    segments: tuple[Any, ...]
    is_action: tuple[bool, ...]
    candidates: tuple[tuple[Any, ...] | None, ...] | None = None
    end_of_turn: Any = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        segs = tuple(s if isinstance(s, str) else tuple(int(x) for x in s) for s in self.segments)
        object.__setattr__(self, "segments", segs)
        object.__setattr__(self, "is_action", tuple(bool(x) for x in self.is_action))
        if len(segs) != len(self.is_action):
            raise ValueError(f"Episode: {len(segs)} segments but {len(self.is_action)} is_action flags")
        if len({isinstance(s, str) for s in segs}) > 1:
            raise TypeError("Episode: segments must be all str or all token ids")
        eot = self.end_of_turn
        if segs and isinstance(segs[0], str) != isinstance(eot, str):
            if not (eot == "" or eot == () or eot is None):
                raise TypeError("Episode: end_of_turn must be of the same kind (text or ids) as the segments")
        if eot is None or eot == "" or eot == ():
            object.__setattr__(self, "end_of_turn", "" if not segs or isinstance(segs[0], str) else ())
        elif not isinstance(eot, str):
            object.__setattr__(self, "end_of_turn", tuple(int(x) for x in eot))
        if self.candidates is not None and len(self.candidates) != self.n_actions:
            raise ValueError(f"Episode: {len(self.candidates)} candidate sets for {self.n_actions} actions")

    @property
    def n_actions(self) -> int:
        return sum(self.is_action)

    @property
    def action_positions(self) -> list[int]:
        return [i for i, a in enumerate(self.is_action) if a]

    @classmethod
    def from_trajectory(cls, traj: Trajectory, *, prompt: str = "", action_prefix: str = "\n> ",
                        end_of_turn: str = "\n") -> Episode:
        """The plain text layout ``prompt + o_0 + action_prefix | a_0 | end_of_turn | o_1 + action_prefix | a_1 ...``
        (:data:`RENDERER_VERSION`). Candidates come from ``step.info["admissible_commands"]`` when every step has
        them. Use it only when the policy was prompted the same way; otherwise build the Episode from the
        policy's own rendering."""
        segs: list[str] = []
        flags: list[bool] = []
        cands: list[tuple[str, ...] | None] = []
        for t, step in enumerate(traj.steps):
            segs.append((prompt if t == 0 else "") + step.observation + action_prefix)
            flags.append(False)
            segs.append(step.action)
            flags.append(True)
            adm = step.info.get("admissible_commands") if isinstance(step.info, dict) else None
            cands.append(None if adm is None else tuple(adm))
        has_all = bool(cands) and all(c is not None for c in cands)
        return cls(tuple(segs), tuple(flags), tuple(cands) if has_all else None, end_of_turn,
                   meta={"renderer": RENDERER_VERSION})

    @classmethod
    def from_steps(cls, observations: Sequence[str], actions: Sequence[str],
                   candidates: Sequence[Sequence[str] | None] | None = None, *, prompt: str = "",
                   action_prefix: str = "\n> ", end_of_turn: str = "\n") -> Episode:
        """The same layout as :meth:`from_trajectory` from plain lists (e.g. one trajectory's rows of a
        ``StepTable``: ``obs``, ``action``, ``candidates``)."""
        if len(observations) != len(actions):
            raise ValueError("from_steps: one observation per action")
        segs, flags = [], []
        for t, (o, a) in enumerate(zip(observations, actions)):
            segs += [(prompt if t == 0 else "") + o + action_prefix, a]
            flags += [False, True]
        cands = None
        if candidates is not None and all(c is not None for c in candidates):
            cands = tuple(tuple(c) for c in candidates)  # type: ignore[union-attr]
        return cls(tuple(segs), tuple(flags), cands, end_of_turn, meta={"renderer": RENDERER_VERSION})


@dataclass(frozen=True)
class StepScores:
    """Per-action scores of one episode, shape (T,) each (T = number of actions).

    ``A``: the progress advantage (NaN where the span was empty or truncated). ``policy_logprob`` /
    ``ref_logprob``: the token-aggregated log-probs of each model (the "log π" baseline), or log π(a|s) over the
    candidates. ``self_certainty``: token-aggregated top-k mean log-prob of the policy (None unless ``top_k``).
    ``flags[t]``: "" (scored), "empty" or "truncated". ``n_missing`` = number of NaN steps.
    """

    A: np.ndarray
    policy_logprob: np.ndarray
    ref_logprob: np.ndarray
    self_certainty: np.ndarray | None
    flags: tuple[str, ...]
    n_truncated_left: int = 0

    @property
    def n_missing(self) -> int:
        return int(np.isnan(self.A).sum())

    def __len__(self) -> int:
        return int(self.A.size)


class ProgressAdvantageScorer:
    """β·log(π_θ/π_ref) step scores for any (policy, reference) pair of the lm layer.

    The two models must tokenize the same way (compared by :func:`agentmill.lm.scoring.tokenizer_fingerprint`),
    unless ``cfg.allow_cross_tokenizer`` (then ``token_agg`` must be "sum" and segments must be text: each model
    scores its own tokenization of the same text). Exactness (A_t = A*) needs the KL-optimal policy for this
    reference, β and action space (README, Caveats); for other pairs the score is a heuristic the
    identity motivates.
    """

    def __init__(self, policy: Any, reference: Any, cfg: PAConfig = PAConfig()) -> None:
        self.policy, self.reference, self.cfg = policy, reference, cfg
        self.fingerprints = (tokenizer_fingerprint(policy), tokenizer_fingerprint(reference))
        self.same_tokenizer = self.fingerprints[0] == self.fingerprints[1]
        if not self.same_tokenizer and not cfg.allow_cross_tokenizer:
            raise ValueError(f"tokenizer mismatch between policy {getattr(policy, 'spec', '?')!r} and reference "
                             f"{getattr(reference, 'spec', '?')!r} (fingerprints {self.fingerprints[0]} vs "
                             f"{self.fingerprints[1]}); token log-ratios need one tokenization. Set "
                             "PAConfig(token_agg='sum', allow_cross_tokenizer=True) to compare per-action totals")

    def identity(self) -> dict[str, Any]:
        """What a score depends on; stored next to scores so they are never re-used with another pair [R]."""
        return {"policy": getattr(self.policy, "spec", type(self.policy).__name__),
                "reference": getattr(self.reference, "spec", type(self.reference).__name__),
                "tokenizers": list(self.fingerprints), "beta": self.cfg.beta, "token_agg": self.cfg.token_agg,
                "ratio_mode": self.cfg.ratio_mode, "action_space": self.cfg.action_space,
                "renderer": RENDERER_VERSION}

    # ------------------------------------------------------------------------------------------ public API
    def step_scores(self, traj: Trajectory | Episode) -> StepScores:
        return self.score_many([traj], batch_size=1, _warn=False)[0]

    def trajectory_score(self, traj: Trajectory | Episode, step_agg: str | None = None) -> float:
        return aggregate_steps(self.step_scores(traj).A, step_agg or self.cfg.step_agg)

    def score_many(self, trajs: Sequence[Trajectory | Episode], batch_size: int = 4, *,
                   _warn: bool = True) -> list[StepScores]:
        """Score many episodes, ``batch_size`` sequences per forward pass of each model. Warns when every score is
        the same (the policy equals the reference: nothing to grade with)."""
        eps = [t if isinstance(t, Episode) else Episode.from_trajectory(t) for t in trajs]
        if self.cfg.action_space == "candidates":
            out = [self._score_candidates(ep, batch_size) for ep in eps]
        else:
            out = self._score_free_text(eps, batch_size)
        if _warn:
            vals = np.concatenate([s.A for s in out]) if out else np.zeros(0)
            vals = vals[~np.isnan(vals)]
            if vals.size >= 2 and np.all(vals == vals[0]):
                warnings.warn(f"all {vals.size} step scores equal {vals[0]:.3g}: the policy equals the reference "
                              "(or ignores the context); progress advantage carries no signal here", stacklevel=2)
        return out

    def step_scores_prefix_rescoring(self, traj: Trajectory | Episode) -> np.ndarray:
        """The slow reference of PERF-5: each action scored by its own forward pass over the episode prefix up to
        that action (T passes per model instead of one). Same numbers as :meth:`step_scores` in free-text mode
        (to float rounding); exists to time the one-pass design and to test it."""
        ep = traj if isinstance(traj, Episode) else Episode.from_trajectory(traj)
        if self.cfg.action_space != "free_text":
            raise ValueError("prefix re-scoring is the free-text baseline; set action_space='free_text'")
        segs, spans = self._layout(ep)
        out = []
        for idx in spans:
            prefix = segs[: idx[-1] + 1]
            p = self._score(self.policy, [prefix], 1)[0]
            r = self._score(self.reference, [prefix], 1)[0]
            tp = np.concatenate([p.token_logprobs[i] for i in idx])
            tr = np.concatenate([r.token_logprobs[i] for i in idx])
            if tp.size == 0 or np.isnan(tp).any() or np.isnan(tr).any():
                out.append(math.nan)
            elif self.same_tokenizer:
                out.append(step_score(tp, tr, beta=self.cfg.beta, token_agg=self.cfg.token_agg,
                                      ratio_mode=self.cfg.ratio_mode))
            else:
                out.append(self.cfg.beta * (aggregate_tokens(tp, "sum") - aggregate_tokens(tr, "sum")))
        return np.asarray(out, dtype=np.float64)

    # ------------------------------------------------------------------------------------------ free text
    def _layout(self, ep: Episode) -> tuple[list[Any], list[list[int]]]:
        """Segments with end-of-turn markers inserted after actions, and each action's segment indices."""
        segs: list[Any] = []
        spans: list[list[int]] = []
        eot = ep.end_of_turn
        for seg, is_act in zip(ep.segments, ep.is_action):
            segs.append(seg)
            if is_act:
                idx = [len(segs) - 1]
                if len(eot):
                    segs.append(eot)
                    idx.append(len(segs) - 1)
                spans.append(idx)
        return segs, spans

    def _score(self, lm: Any, batch: list[list[Any]], batch_size: int) -> list[SegmentScores]:
        return score_segments_batch(lm, batch, batch_size=batch_size, top_k=self.cfg.top_k if lm is self.policy
                                    else 0, truncate=self.cfg.truncate)  # type: ignore[arg-type]

    def _score_free_text(self, eps: list[Episode], batch_size: int) -> list[StepScores]:
        layouts = [self._layout(ep) for ep in eps]
        if not self.same_tokenizer and any(segs and not isinstance(segs[0], str) for segs, _ in layouts):
            raise ValueError("with different tokenizers the episode must be text, not token ids")
        pol = self._score(self.policy, [segs for segs, _ in layouts], batch_size)
        ref = self._score(self.reference, [segs for segs, _ in layouts], batch_size)
        cfg = self.cfg
        out = []
        for (segs, spans), p, r in zip(layouts, pol, ref):
            A, lp_p, lp_r, sc, flags = [], [], [], [], []
            for idx in spans:
                tp = np.concatenate([p.token_logprobs[i] for i in idx])
                tr = np.concatenate([r.token_logprobs[i] for i in idx])
                flag = "empty" if tp.size == 0 else ("truncated" if np.isnan(tp).any() or np.isnan(tr).any()
                                                     else "")
                flags.append(flag)
                agg_p, agg_r = aggregate_tokens(tp, cfg.token_agg), aggregate_tokens(tr, cfg.token_agg)
                lp_p.append(agg_p)
                lp_r.append(agg_r)
                if flag:
                    A.append(math.nan)
                elif self.same_tokenizer:
                    A.append(step_score(tp, tr, beta=cfg.beta, token_agg=cfg.token_agg, ratio_mode=cfg.ratio_mode))
                else:  # cross-tokenizer: only per-action totals are comparable (token_agg == "sum" enforced)
                    A.append(cfg.beta * (agg_p - agg_r))
                if p.topk_mean is not None:
                    sc.append(aggregate_tokens(np.concatenate([p.topk_mean[i] for i in idx]), cfg.token_agg))
            out.append(StepScores(np.asarray(A, dtype=np.float64), np.asarray(lp_p), np.asarray(lp_r),
                                  np.asarray(sc) if p.topk_mean is not None else None, tuple(flags),
                                  max(p.n_truncated_left, r.n_truncated_left)))
        return out

    # ------------------------------------------------------------------------------------------ candidates
    def _score_candidates(self, ep: Episode, batch_size: int) -> StepScores:
        """Every candidate of step t is scored after the same context (the episode up to a_t); log π(a|s) =
        ℓ(a) − logsumexp_C ℓ for each model, A_t their β-scaled difference."""
        if ep.candidates is None:
            raise ValueError("action_space='candidates' needs the admissible set of every step (Episode.candidates "
                             "or info['admissible_commands'])")
        segs, spans = self._layout(ep)
        positions = [idx[0] for idx in spans]
        eot = ep.end_of_turn
        batch, owners, chosen = [], [], []
        for k, (pos, cands) in enumerate(zip(positions, ep.candidates)):
            if cands is None or len(cands) == 0:
                raise ValueError(f"action {k}: no candidates recorded")
            norm = [c if isinstance(c, str) else tuple(int(x) for x in c) for c in cands]
            if segs[pos] not in norm:
                raise ValueError(f"action {k}: the action taken {segs[pos]!r} is not among its {len(norm)} "
                                 "candidates")
            chosen.append(norm.index(segs[pos]))
            for c in norm:
                batch.append(segs[:pos] + [c] + ([eot] if len(eot) else []))
                owners.append(k)
        pol = self._score(self.policy, batch, batch_size)
        ref = self._score(self.reference, batch, batch_size)
        n = len(positions)
        ell_p: list[list[float]] = [[] for _ in range(n)]
        ell_r: list[list[float]] = [[] for _ in range(n)]
        trunc = 0
        for k, p, r, seq in zip(owners, pol, ref, batch):
            tail = range(len(seq) - (2 if len(eot) else 1), len(seq))
            ell_p[k].append(aggregate_tokens(np.concatenate([p.token_logprobs[i] for i in tail]), "sum"))
            ell_r[k].append(aggregate_tokens(np.concatenate([r.token_logprobs[i] for i in tail]), "sum"))
            trunc = max(trunc, p.n_truncated_left, r.n_truncated_left)
        A, lp_p, lp_r, flags = [], [], [], []
        for k in range(n):
            ep_, er_ = np.asarray(ell_p[k]), np.asarray(ell_r[k])
            a = candidate_step_score(ep_, er_, chosen[k], beta=self.cfg.beta)
            A.append(a)
            flags.append("truncated" if math.isnan(a) else "")
            lp_p.append(_log_softmax_at(ep_, chosen[k]))
            lp_r.append(_log_softmax_at(er_, chosen[k]))
        return StepScores(np.asarray(A, dtype=np.float64), np.asarray(lp_p), np.asarray(lp_r), None, tuple(flags),
                          trunc)


def _log_softmax_at(v: np.ndarray, i: int) -> float:
    """log softmax(v)[i], NaN if any entry is NaN."""
    if np.isnan(v).any():
        return math.nan
    m = v.max()
    return float(v[i] - m - np.log(np.exp(v - m).sum()))


def chat_episode(lm: Any, observations: Sequence[str], actions: Sequence[str], *, system: str | None = None,
                 candidates: Sequence[Sequence[str] | None] | None = None) -> Episode:
    """Render a multi-turn episode with the model's own chat template: observation t is a user turn, action t the
    assistant's reply (README deviation 8: render the episode as the policy saw it).

    The template text of the conversation up to each user turn (with the generation prompt) is what the policy
    was conditioned on; the episode's non-action segments are the differences between consecutive prompts, the
    actions are separate segments (tokenized separately, as decoding produced them), and the end-of-turn marker
    (the tokenizer's EOS text, e.g. ``<|im_end|>``) follows each action. Raises ``ValueError`` if the template is
    not prefix-stable (a later prompt does not extend the earlier one) — then record token ids at rollout time.
    ``system=None`` keeps the template's default system prompt (SmolLM2 can derail with a custom one).
    """
    tok = getattr(lm, "tokenizer", None)
    if tok is None or not getattr(tok, "chat_template", None):
        raise ValueError(f"{getattr(lm, 'spec', '?')!r} has no chat template; use Episode.from_steps")
    if len(observations) != len(actions) or not actions:
        raise ValueError("chat_episode: one observation per action, at least one step")
    eot = tok.eos_token
    if not eot:
        raise ValueError("chat_episode: the tokenizer has no EOS token to end an assistant turn")
    msgs: list[dict[str, str]] = [] if system is None else [{"role": "system", "content": system}]
    consumed = ""
    segs: list[str] = []
    flags: list[bool] = []
    for t, (obs, act) in enumerate(zip(observations, actions)):
        msgs.append({"role": "user", "content": obs})
        prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        if not prompt.startswith(consumed):
            raise ValueError(f"chat_episode: the chat template is not prefix-stable at step {t}; record the token ids "
                             "the policy saw at rollout time instead")
        segs += [prompt[len(consumed):], act]
        flags += [False, True]
        msgs.append({"role": "assistant", "content": act})
        full = tok.apply_chat_template(msgs, tokenize=False)
        after = full[len(prompt):]
        if not after.startswith(act + eot):
            raise ValueError(f"chat_episode: the template does not close assistant turn {t} with {eot!r} right after "
                             "the action; record token ids at rollout time instead")
        consumed = prompt + act + eot
    cands = None if candidates is None else tuple(None if c is None else tuple(c) for c in candidates)
    if cands is not None and any(c is None for c in cands):
        cands = None
    return Episode(tuple(segs), tuple(flags), cands, eot, meta={"renderer": f"chat:{getattr(lm, 'spec', '?')}"})


def episodes_from_table(table: Any, *, prompt: str = "", action_prefix: str = "\n> ",
                        end_of_turn: str = "\n") -> list[tuple[tuple[str, str], Episode]]:
    """One plain-layout :class:`Episode` per trajectory of a ``StepTable`` (``core.types``), keyed by
    (group_id, traj_id), in table order; the rows' ``candidates`` become the admissible sets when every row has
    them. Step scores then align with the table's rows trajectory by trajectory."""
    starts = list(table.traj_starts)
    ends = starts[1:] + [len(table)]
    out = []
    for s, e in zip(starts, ends):
        cands = [table.candidates[r] for r in range(s, e)]
        ep = Episode.from_steps([table.obs[r] for r in range(s, e)], [table.action[r] for r in range(s, e)],
                                cands if all(c is not None for c in cands) else None, prompt=prompt,
                                action_prefix=action_prefix, end_of_turn=end_of_turn)
        out.append(((str(table.group_id[s]), str(table.traj_id[s])), ep))
    return out


SCORES_SCHEMA = "agentmill.progress_scores/1"


def write_scores(path: Any, keyed_scores: Sequence[tuple[Any, StepScores]], identity: dict[str, Any]) -> Any:
    """Write step scores with the pair's identity (:meth:`ProgressAdvantageScorer.identity`) as one JSON file,
    atomically (temp file, fsync, rename). NaN is stored as null. Returns the path."""
    from agentmill.core.records import write_json_atomic

    def arr(x: np.ndarray | None) -> list[float | None] | None:
        return None if x is None else [None if math.isnan(v) else float(v) for v in np.asarray(x, dtype=float)]

    rows = [{"key": list(k) if isinstance(k, tuple) else k, "A": arr(s.A), "policy_logprob": arr(s.policy_logprob),
             "ref_logprob": arr(s.ref_logprob), "self_certainty": arr(s.self_certainty), "flags": list(s.flags),
             "n_truncated_left": s.n_truncated_left} for k, s in keyed_scores]
    return write_json_atomic(path, {"schema": SCORES_SCHEMA, "identity": identity, "scores": rows})


def read_scores(path: Any, identity: dict[str, Any] | None = None) -> list[tuple[Any, StepScores]]:
    """Read a file of :func:`write_scores`. With ``identity``, refuse (``ValueError``) a file written for another
    pair, β, aggregation or renderer: scores must never be re-used across pairs silently [R]."""
    import json

    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if doc.get("schema") != SCORES_SCHEMA:
        raise ValueError(f"{path}: not a progress-score file (schema {doc.get('schema')!r})")
    if identity is not None and doc["identity"] != json.loads(json.dumps(identity)):
        diff = sorted(k for k in set(doc["identity"]) | set(identity)
                      if doc["identity"].get(k) != json.loads(json.dumps(identity)).get(k))
        raise ValueError(f"{path}: scores were written for another pair/config (differs in {diff}); re-score")

    def arr(x: list[float | None] | None) -> np.ndarray | None:
        return None if x is None else np.array([math.nan if v is None else v for v in x], dtype=np.float64)

    out = []
    for r in doc["scores"]:
        key = tuple(r["key"]) if isinstance(r["key"], list) else r["key"]
        out.append((key, StepScores(arr(r["A"]), arr(r["policy_logprob"]), arr(r["ref_logprob"]),  # type: ignore[arg-type]
                                    arr(r["self_certainty"]), tuple(r["flags"]), int(r["n_truncated_left"]))))
    return out

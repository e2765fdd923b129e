"""Unified use: world-model training as a warm-up for acting, on a ``tiny:`` model (docs/methods/world_model.md).

Every arm starts from the same random init θ₀ and differs only before behaviour cloning (BC):

- ``none``: θ₀ → BC.
- ``wm``: θ₀ → SFT on world-model examples (next-observation prediction with reasoning) → BC.
- ``shuffled``: θ₀ → SFT on the same examples with the actions permuted among the transitions of each task (so the
  next observation no longer follows from the action; the reasoning restates the shown action), same steps → BC.
  It separates "learned the dynamics" from "saw more in-domain text" [R].

BC: expert episodes (the ε = 0 oracle walker: uniform over the commands that lower the distance to the win) on the
training tasks; the agent prompt is the goal, the last two turns (command and feedback line), the current observation
and the admissible commands; the loss is on the command tokens (and EOS). Evaluation on held-out tasks: next-action
accuracy on the expert's states (the arg-max of log p(command + EOS | prompt) over the admissible commands is one of
the expert's optimal commands) and greedy closed-loop success in the real env.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.types import Message
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, KeyDoorLayout
from agentmill.methods.world_model.data import Transition
from agentmill.methods.world_model.format import render_chatml

ARMS = ("none", "wm", "shuffled")
AGENT_SYSTEM = "You are an agent in a text world. Reply with the next command only."


@dataclass(frozen=True)
class WarmupConfig:
    """One warm-up comparison (all arms share it)."""

    warmup_steps: int = 200
    """SFT steps on world-model examples (the ``wm`` and ``shuffled`` arms)."""
    bc_steps: int = 100
    """Behaviour-cloning steps (every arm)."""
    lr: float = 3e-3
    """Peak learning rate of both stages [R: the pipeline's SFT rate, fixed before any run]."""
    batch: int = 8
    """Sequences per step."""
    seq_len: int = 512
    """Longest sequence kept (tokens)."""


@dataclass(frozen=True)
class Decision:
    """One expert state: the agent prompt, the admissible commands, the expert's optimal commands and its pick."""

    task_id: str
    t: int
    prompt: str
    commands: tuple[str, ...]
    optimal: tuple[str, ...]
    action: str


@dataclass(frozen=True)
class TextPair:
    """A (prompt, target) pair in the shape ``train.train_sft`` reads."""

    prompt: str
    target: str


def agent_prompt(goal: str, turns: Sequence[tuple[str, str]], obs: str, commands: Sequence[str]) -> str:
    """ChatML text of the agent's prompt; ``turns`` = the last (command, feedback line) pairs, oldest first."""
    parts = [f"**Task:**\n{goal}"]
    if turns:
        parts.append("**Previous turns:**\n" + "\n".join(f"> {a}\n{fb}" for a, fb in turns[-2:]))
    parts.append(f"**Observation:**\n{obs}")
    parts.append("**Commands:** " + "; ".join(commands))
    return render_chatml([Message("system", AGENT_SYSTEM), Message("user", "\n\n".join(parts))])


def _feedback(obs: str) -> str:
    first = obs.split("\n", 1)[0]
    return "" if first.startswith("-= ") else first


def expert_decisions(layouts: Sequence[KeyDoorLayout], config: KeyDoorConfig, episodes: int, *,
                     seed: int = 0) -> list[Decision]:
    """``episodes`` expert episodes over ``layouts`` (cycled), every state of each as a :class:`Decision`. The
    expert picks uniformly among ``info["oracle"]["plan_commands"]`` (the ε = 0 oracle walker)."""
    out: list[Decision] = []
    for e in range(episodes):
        lay = layouts[e % len(layouts)]
        env = KeyDoorEnv(lay, config)
        rng = np.random.default_rng(derive_seed(seed, "wm-expert", lay.task_id, e))
        obs, info = env.reset(seed=derive_seed(seed, "wm-expert-env", e))
        turns: list[tuple[str, str]] = []
        done, t = False, 0
        while not done:
            cmds = tuple(info["admissible_commands"])
            plan = tuple(c for c in info["oracle"]["plan_commands"] if c in cmds)
            if not plan:  # a dead end cannot occur without the trap; stop rather than invent a label
                break
            a = plan[int(rng.integers(len(plan)))]
            out.append(Decision(lay.task_id, t, agent_prompt(lay.objective, turns, obs, cmds), cmds, plan, a))
            obs, _, term, trunc, info = env.step(a)
            turns.append((a, _feedback(obs)))
            done, t = term or trunc, t + 1
    return out


def bc_pairs(decisions: Sequence[Decision]) -> list[TextPair]:
    """BC examples: prompt → the expert's command."""
    return [TextPair(d.prompt, d.action) for d in decisions]


def shuffle_actions(rows: Sequence[Transition], seed: int) -> list[Transition]:
    """``rows`` with the actions permuted among the transitions of each task (next observations and privileged
    diffs untouched): the shuffled-action control's data."""
    rng = np.random.default_rng(derive_seed(seed, "wm-shuffle-actions"))
    by_task: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_task.setdefault(r.task_id, []).append(i)
    out = list(rows)
    for idx in by_task.values():
        perm = rng.permutation(idx)
        for i, j in zip(idx, perm):
            out[i] = dataclasses.replace(rows[i], action=rows[int(j)].action)
    return out


# ---------------------------------------------------------------------------------------------------------------
# scoring and acting

def command_logprobs(lm: Any, prompts: Sequence[str], candidates: Sequence[Sequence[str]], *,
                     chunk: int = 32) -> list[np.ndarray]:
    """log p(command + EOS | prompt) for every candidate of every prompt. Per ``chunk`` prompts: one forward over
    the left-padded prompts (the layout of ``lm.decoding.decode_rows``), their caches expanded to one row per
    candidate, and one forward over the right-padded candidate tokens (a causal model never reads the padding behind
    a candidate's own tokens). A prompt too long for the context keeps its last tokens."""
    import torch

    from agentmill.lm.tiny import BOS

    bos, eos, pad = int(getattr(lm, "bos_id", BOS)), int(lm.eos_token_ids[0]), int(lm.pad_id)
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensor ops on a shared machine: one thread is faster and never oversubscribes
    try:
        return [sc for s0 in range(0, len(prompts), chunk)
                for sc in _score_chunk(lm, prompts[s0:s0 + chunk], candidates[s0:s0 + chunk], bos, eos, pad)]
    finally:
        torch.set_num_threads(n_threads)


def _score_chunk(lm: Any, prompts: Sequence[str], candidates: Sequence[Sequence[str]], bos: int, eos: int,
                 pad: int) -> list[np.ndarray]:
    import torch

    cids = [[[*lm.encode(c), eos] for c in cands] for cands in candidates]
    m = max(len(c) for cs in cids for c in cs)
    pids = [[bos, *lm.encode(p)][-(lm.cfg.max_len - m):] for p in prompts]
    width = max(len(p) for p in pids)
    ids = torch.full((len(pids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(pids), width), dtype=torch.long)
    for r, p in enumerate(pids):
        ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    fo = lm.forward(ids, attention_mask=mask, position_ids=pos)
    first = torch.log_softmax(fo.logits[:, -1].double(), -1)
    owner = [i for i, cs in enumerate(cids) for _ in cs]
    flat = [c for cs in cids for c in cs]
    scores = np.array([float(first[i, c[0]]) for i, c in zip(owner, flat)])
    if m > 1:
        sel = torch.tensor(owner)
        cache = fo.cache
        cache.batch_select_indices(sel)
        x = torch.full((len(flat), m - 1), pad, dtype=torch.long)
        tgt = torch.full((len(flat), m - 1), pad, dtype=torch.long)
        valid = torch.zeros((len(flat), m - 1), dtype=torch.double)
        for r, c in enumerate(flat):
            x[r, :len(c) - 1] = torch.tensor(c[:-1])
            tgt[r, :len(c) - 1] = torch.tensor(c[1:])
            valid[r, :len(c) - 1] = 1.0
        mask2 = torch.cat([mask[sel], torch.ones((len(flat), m - 1), dtype=torch.long)], 1)
        pos2 = pos[sel, -1:] + 1 + torch.arange(m - 1)[None]
        logits = lm.forward(x, cache, attention_mask=mask2, position_ids=pos2).logits.double()
        lp = (logits.gather(2, tgt[..., None])[..., 0] - torch.logsumexp(logits, -1)) * valid
        scores += lp.sum(1).numpy()
    out, k = [], 0
    for cs in cids:
        out.append(scores[k:k + len(cs)])
        k += len(cs)
    return out


def next_action_hits(lm: Any, decisions: Sequence[Decision]) -> tuple[np.ndarray, np.ndarray]:
    """Per decision: (1 if the arg-max command is one of the expert's optimal commands, 1 if it equals the expert's
    sampled pick). Ties go to the first command in sorted order."""
    lps = command_logprobs(lm, [d.prompt for d in decisions], [d.commands for d in decisions])
    best = [d.commands[int(np.argmax(lp))] for d, lp in zip(decisions, lps)]
    return (np.array([b in d.optimal for b, d in zip(best, decisions)], float),
            np.array([b == d.action for b, d in zip(best, decisions)], float))


def closed_loop_success(lm: Any, layouts: Sequence[KeyDoorLayout], config: KeyDoorConfig) -> np.ndarray:
    """One greedy episode per layout in the real env (the arg-max command each step, batched across layouts);
    1 where the episode is won."""
    envs = [KeyDoorEnv(lay, config) for lay in layouts]
    state = []
    for env in envs:
        obs, info = env.reset(seed=0)
        state.append([obs, info, [], False])
    won = np.zeros(len(envs))
    while True:
        live = [i for i, st in enumerate(state) if not st[3]]
        if not live:
            break
        prompts = [agent_prompt(layouts[i].objective, state[i][2], state[i][0], state[i][1]["admissible_commands"])
                   for i in live]
        lps = command_logprobs(lm, prompts, [state[i][1]["admissible_commands"] for i in live])
        for i, lp in zip(live, lps):
            a = state[i][1]["admissible_commands"][int(np.argmax(lp))]
            obs, _, term, trunc, info = envs[i].step(a)
            state[i][2].append((a, _feedback(obs)))
            state[i][0], state[i][1] = obs, info
            if term or trunc:
                state[i][3] = True
                won[i] = float(bool(info["won"]))
    return won


def run_arm(arm: str, fresh: Any, wm_examples: Sequence[Any], shuffled_examples: Sequence[Any],
            bc: Sequence[TextPair], cfg: WarmupConfig, seed: int) -> tuple[Any, dict[str, Any]]:
    """Train one arm from ``fresh()`` (θ₀; every arm gets the same init) and return (model, log)."""
    from agentmill.methods.world_model.train import StageConfig, train_sft

    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    lm = fresh()
    log: dict[str, Any] = {"arm": arm, "seed": seed}
    if arm != "none":
        exs = wm_examples if arm == "wm" else shuffled_examples
        losses = train_sft(lm, exs, StageConfig(steps=cfg.warmup_steps, lr=cfg.lr, batch=cfg.batch,
                                                seq_len=cfg.seq_len, seed=seed))
        log["warmup_loss_first"], log["warmup_loss_last"] = losses[0], float(np.mean(losses[-10:]))
    losses = train_sft(lm, bc, StageConfig(steps=cfg.bc_steps, lr=cfg.lr, batch=cfg.batch, seq_len=cfg.seq_len,
                                           seed=derive_seed(seed, "wm-bc")))
    log["bc_loss_first"], log["bc_loss_last"] = losses[0], float(np.mean(losses[-10:]))
    return lm, log

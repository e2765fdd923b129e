"""Single-token Cliff-DPO (EOS masked by default), trajectory DPO, and the compute ledger.

Single-token loss, with c = (q, y_<t) and one forward of policy and reference at c:
    m = β[(log π_θ(x_w|c) − log π_ref(x_w|c)) − (log π_θ(x_l|c) − log π_ref(x_l|c))],   L = −log σ(m).
Both tokens share one position, so one forward serves every pair of a cliff. The paper-faithful variant
(``mask_eos=False``) scores completions [x, EOS], as TRL's ``DPOTrainer`` tokenisation appends EOS
(huggingface/trl#4481): it adds log π(EOS | c, x) terms that train "stop right after the chosen token" [P quirk].
Tiny-model defaults: full fine-tuning, β = 0.1, AdamW lr 1e-4, 3 epochs, batch 16 [R].
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Sequence

import numpy as np

from agentmill.methods.cliff_tokens.pairs import TokenPair


@dataclass(frozen=True)
class DPOConfig:
    """Cliff-DPO / trajectory DPO settings (tiny models: full fine-tuning)."""

    mode: Literal["token", "trajectory"] = "token"
    """``token``: one-token pairs at cliffs; ``trajectory``: whole-response pairs."""
    beta: float = 0.1
    """DPO temperature β (function default 0.1 [P] ``train_dpo.py``)."""
    mask_eos: bool = True
    """Drop the EOS terms that TRL-style tokenisation adds (False = paper-faithful quirk)."""
    lr: float = 1e-4
    """AdamW learning rate for the tiny model [R]."""
    epochs: int = 3
    """Passes over the pairs [R]."""
    batch_size: int = 16
    """Pairs per optimiser step [R]."""
    seed: int = 0
    """Shuffling seed."""


@dataclass
class ComputeLedger:
    """Detection and training cost, always filled. Total in forward-token equivalents = generated + prefilled +
    3 × trained tokens (3 = forward + backward [R])."""

    detection_generated: int = 0
    detection_forward: int = 0
    train_forward_tokens: int = 0
    train_loss_positions: int = 0
    optimizer_steps: int = 0
    wall: dict[str, float] = field(default_factory=dict)

    def total(self) -> float:
        return float(self.detection_generated + self.detection_forward + 3 * self.train_forward_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_forward_equiv": self.total()}


def single_token_dpo_loss(policy_logp, ref_logp, chosen, rejected, beta: float, *, eos_terms=None):
    """Mean loss over pairs. ``policy_logp``/``ref_logp``: (B, V) log-probs at each pair's prefix; ``chosen``,
    ``rejected``: (B,) ids; ``eos_terms``: optional (pol_w, pol_l, ref_w, ref_l) tensors (B,) of log π(EOS|c, x)."""
    import torch

    idx = torch.arange(policy_logp.shape[0])
    lw = policy_logp[idx, chosen] - ref_logp[idx, chosen]
    ll = policy_logp[idx, rejected] - ref_logp[idx, rejected]
    if eos_terms is not None:
        pw, pl, rw, rl = eos_terms
        lw, ll = lw + (pw - rw), ll + (pl - rl)
    m = beta * (lw - ll)
    return -torch.nn.functional.logsigmoid(m).mean()


def trajectory_dpo_loss(policy_logps_w, policy_logps_l, ref_w, ref_l, beta: float):
    """Standard DPO over summed response log-probs (B,)."""
    import torch

    m = beta * ((policy_logps_w - ref_w) - (policy_logps_l - ref_l))
    return -torch.nn.functional.logsigmoid(m).mean()


def _logp_at(net, seqs: Sequence[Sequence[int]], pad: int):
    """Log-softmax at the last real position of each (right-padded) sequence, and the module's full outputs."""
    import torch

    L = max(len(s) for s in seqs)
    x = torch.full((len(seqs), L), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, : len(s)] = torch.tensor(s)
    logits, _ = net(x)
    last = torch.tensor([len(s) - 1 for s in seqs])
    return torch.log_softmax(logits[torch.arange(len(seqs)), last].double(), -1)


def eos_logp(lm: Any, pairs: Sequence[TokenPair], which: str = "chosen") -> np.ndarray:
    """log π(EOS | c, x) for each pair's chosen (or rejected) token x."""
    import torch

    eos = lm.eos_token_ids[0]
    seqs = [list(p.prefix_ids) + [p.chosen if which == "chosen" else p.rejected] for p in pairs]
    with torch.no_grad():
        return _logp_at(lm.model, seqs, lm.pad_id)[:, eos].numpy()


def train_dpo(lm: Any, pairs: Sequence[TokenPair], cfg: DPOConfig, ledger: ComputeLedger | None = None
              ) -> dict[str, Any]:
    """Full fine-tuning of a ``tiny:`` model (``lm.model``) on one-token pairs; the reference is a frozen copy taken
    before the first step. Returns the per-step losses. Trains in place."""
    import torch

    if cfg.mode != "token":
        raise ValueError("train_dpo here trains one-token pairs; trajectory pairs use train_trajectory_dpo")
    if not pairs:
        raise ValueError("train_dpo: empty pair set")
    if not cfg.mask_eos:
        warnings.warn("mask_eos=False: the paper-faithful EOS terms train the model to stop right after the chosen "
                      "token (TRL appends EOS to both completions, huggingface/trl#4481)", stacklevel=2)
    ledger = ledger if ledger is not None else ComputeLedger()
    net = lm.model
    ref = copy.deepcopy(net).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    eos, pad = lm.eos_token_ids[0], lm.pad_id
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = np.random.default_rng(cfg.seed)
    losses, t0 = [], time.perf_counter()
    net.train()
    for _ in range(cfg.epochs):
        order = rng.permutation(len(pairs))
        for s in range(0, len(order), cfg.batch_size):
            batch = [pairs[i] for i in order[s: s + cfg.batch_size]]
            pre = [list(p.prefix_ids) for p in batch]
            ch = torch.tensor([p.chosen for p in batch])
            rj = torch.tensor([p.rejected for p in batch])
            pol = _logp_at(net, pre, pad)
            with torch.no_grad():
                rf = _logp_at(ref, pre, pad)
            eos_terms = None
            ntok = sum(len(x) for x in pre)
            if not cfg.mask_eos:
                sw = [x + [p.chosen] for x, p in zip(pre, batch)]
                sl = [x + [p.rejected] for x, p in zip(pre, batch)]
                pw, pl = _logp_at(net, sw, pad)[:, eos], _logp_at(net, sl, pad)[:, eos]
                with torch.no_grad():
                    rw, rl = _logp_at(ref, sw, pad)[:, eos], _logp_at(ref, sl, pad)[:, eos]
                eos_terms = (pw, pl, rw, rl)
                ntok += sum(len(x) for x in sw) + sum(len(x) for x in sl)
            loss = single_token_dpo_loss(pol, rf, ch, rj, cfg.beta, eos_terms=eos_terms)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            ledger.optimizer_steps += 1
            ledger.train_forward_tokens += ntok
            ledger.train_loss_positions += len(batch) * (2 if cfg.mask_eos else 4)
    net.eval()
    ledger.wall["train"] = ledger.wall.get("train", 0.0) + time.perf_counter() - t0
    return {"losses": losses, "steps": len(losses)}

"""The tiny chained-addition model with planted cliffs: a ``tiny:`` transformer trained from scratch to *be* the
planted policy of :mod:`planted` (same problems, sites and carry-drop rates), with its validation gate.

Two written orders share the sites and rates [R, docs/methods/cliff_tokens.md]:

- ``msd`` (``chainadd-v1``): numbers most-significant digit first, exactly the trace of :mod:`planted`
  (``A:23+45=68;68+17=85;#85``); writing a sum's first digit needs the units carry first.
- ``lsd`` (``chainadd-lsd``, the pre-registered fallback): every number *in the trace* is written least-significant
  digit first (``A:32+54=86;86+71=58;#58``; the prompt is unchanged, the answer after ``#`` is read reversed), so
  the carry is known before the digit it changes. The error token is again the first written character where the
  carry-dropped sum differs from the right one.

Exact law (:func:`enumerate_chain`): the ≤ 2^(m−1) complete traces of a problem, each with its probability and its
sites — position, kind, p_err, the right and the wrong token — so the next-token law at every on-support prefix is
known exactly. Training (:func:`train_chainadd`) distils that law: cross-entropy against the oracle's next-token
distribution at every position of a sampled trace (at a site: right w.p. 1 − p_err, wrong w.p. p_err; elsewhere
the one token). Its expectation over sampled traces is the expected cross-entropy of training on sampled tokens,
with less variance (a deviation from the recipe's hard targets, README deviation 10).

The gate (:func:`chain_gate`) is the one the design pre-registers: on held-out problems, the model's probability
of the wrong digit at planted sites within ±0.05 of 0.15 (SO) and 0.6 (UC), ≥ 0.99 at DF sites, ≥ 0.995 on the
correct token at non-site positions, and ≤ 1 % malformed sampled traces.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from agentmill.methods.cliff_tokens.planted import EOS, MIX, P_ERR, PAD, prompt_ids, sample_problem, site_kind

ORDERS = ("msd", "lsd")


@dataclass(frozen=True)
class ChainSite:
    """A planted site on one trace: the error token is trace index ``pos`` (0-based)."""

    pos: int
    kind: str
    p_err: float
    right: int
    wrong: int
    erred: bool


@dataclass(frozen=True)
class ChainLeaf:
    ids: tuple[int, ...]        # trace token ids, no EOS
    prob: float
    correct: bool
    sites: tuple[ChainSite, ...]


def write_num(v: int, order: str) -> str:
    """``v`` as written in a trace of ``order``."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    return str(v) if order == "msd" else str(v)[::-1]


def enumerate_chain(ops: Sequence[int], order: str = "msd") -> list[ChainLeaf]:
    """All complete traces of ``ops`` in ``order`` with their probabilities, by recursion over the written sum (each
    line copies the previous *written* sum). For ``msd`` these are exactly :func:`planted.enumerate_leaves`."""
    leaves: list[ChainLeaf] = []

    def rec(text: str, x: int, i: int, prob: float, sites: tuple[ChainSite, ...]) -> None:
        if i == len(ops):
            final = text + "#" + write_num(x, order)
            leaves.append(ChainLeaf(tuple(final.encode("ascii")), prob, x == sum(ops), sites))
            return
        y = int(ops[i])
        head = text + write_num(x, order) + "+" + write_num(y, order) + "="
        kind, right = site_kind(x, y), x + y
        if kind is None:
            rec(head + write_num(right, order) + ";", right, i + 1, prob, sites)
            return
        wrong, p = right - 10, P_ERR[kind]
        rs, ws = write_num(right, order), write_num(wrong, order)
        j = next(j for j in range(max(len(rs), len(ws))) if j >= len(ws) or j >= len(rs) or rs[j] != ws[j])
        rt, wt = (ord(rs[j]) if j < len(rs) else ord(";")), (ord(ws[j]) if j < len(ws) else ord(";"))
        pos = len(head) + j
        rec(head + rs + ";", right, i + 1, prob * (1 - p), sites + (ChainSite(pos, kind, p, rt, wt, False),))
        rec(head + ws + ";", wrong, i + 1, prob * p, sites + (ChainSite(pos, kind, p, rt, wt, True),))

    rec("A:", int(ops[0]), 1, 1.0, ())
    return leaves


def grade_chain(text: str, ops: Sequence[int], order: str = "msd") -> bool:
    """True iff the number after the last ``#`` (read in ``order``) equals the sum; a missing or malformed answer
    is wrong."""
    if "#" not in text:
        return False
    tail = text.rsplit("#", 1)[1]
    if not tail.isdigit():
        return False
    return int(tail if order == "msd" else tail[::-1]) == sum(ops)


def chain_format(order: str = "msd") -> str:
    """The regex a well-formed trace (m = 3) matches."""
    return r"A:(\d+)\+(\d+)=(\d+);(\d+)\+(\d+)=(\d+);#(\d+)"


def sample_leaf(ops: Sequence[int], order: str, rng: np.random.Generator) -> ChainLeaf:
    lv = enumerate_chain(ops, order)
    return lv[int(rng.choice(len(lv), p=np.asarray([lf.prob for lf in lv])))]


def ops_of_prompt(prompt: Sequence[int]) -> tuple[int, ...]:
    text = bytes(int(t) for t in prompt if int(t) < 256).decode("ascii")
    if not (text.startswith("Q:") and text.endswith("=\n")):
        raise ValueError(f"not a chainadd prompt: {text!r}")
    return tuple(int(a) for a in text[2:-2].split("+"))


# ------------------------------------------------------------------------------------------------- training
@dataclass(frozen=True)
class ChainRecipe:
    """How the tiny chained-addition model is trained (its content address)."""

    order: str = "msd"
    """Written digit order: ``msd`` (chainadd-v1) or ``lsd`` (the pre-registered fallback)."""
    layers: int = 2
    """Transformer blocks."""
    d: int = 64
    """Residual width."""
    heads: int = 4
    """Attention heads."""
    steps: int = 1500
    """Optimizer steps (fresh oracle problems every batch)."""
    batch: int = 64
    """Traces per step."""
    lr: float = 3e-3
    """AdamW peak learning rate (the chainadd-v1 recipe's [R])."""
    warmup: int = 100
    """Linear warm-up steps, then cosine to 0 (chainadd-v1 [R])."""
    seed: int = 0
    """Initialisation and data seed."""
    site_weight: float = 1.0
    """Loss weight of planted-site positions relative to the others (1 = the plain objective). Each position's
    cross-entropy is minimised by the oracle's law there, so reweighting positions changes how fast each is learned,
    not what is learned [R]."""
    train_mix: tuple[float, float, float] = MIX
    """Problem mix of the training stream (DF / UC only / neither); the evaluation mix is always the planted 20/30/50.
    Like ``site_weight``, it moves no position's target law [R]."""

    def key(self) -> str:
        blob = json.dumps({"recipe": asdict(self), "v": 1}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sample_problems(rng: np.random.Generator, n: int, m: int = 3, mix: tuple[float, float, float] = MIX
                    ) -> list[tuple[int, ...]]:
    """``n`` problems with the law of :func:`planted.sample_problem` (category drawn from ``mix``, operands uniform on
    10..99 within it), by vectorised rejection sampling."""
    cats = rng.choice(3, size=n, p=np.asarray(mix) / sum(mix))
    out: list[tuple[int, ...] | None] = [None] * n
    todo = {c: [i for i in range(n) if cats[i] == c] for c in range(3)}
    while any(todo.values()):
        ops = rng.integers(10, 100, size=(4096, m))
        x = ops[:, 0].copy()
        has_df = np.zeros(len(ops), bool)
        has_uc = np.zeros(len(ops), bool)
        for j in range(1, m):
            y = ops[:, j]
            carry = x % 10 + y % 10 >= 10
            df = carry & (x % 10 == 9) & (y % 10 == 9)
            has_df |= df
            has_uc |= carry & ~df & (y % 10 == 7)
            x = x + y
        masks = {0: has_df, 1: has_uc & ~has_df, 2: ~has_df & ~has_uc}
        for c in range(3):
            rows = np.flatnonzero(masks[c])
            take = min(len(rows), len(todo[c]))
            for i, r in zip(todo[c][:take], rows[:take]):
                out[i] = tuple(int(a) for a in ops[r])
            todo[c] = todo[c][take:]
    return [o for o in out if o is not None]


def distill_batch(rng: np.random.Generator, batch: int, order: str, mix: tuple[float, float, float] = MIX):
    """Tensors for one step: ids [B, L] (prompt + trace + EOS, right-padded), and per target position the main token
    and weight and the alternative (wrong-digit) token and weight: targets for positions 1..L−1."""
    import torch

    probs = sample_problems(rng, batch, mix=mix)
    seqs, sites = [], []
    for ops in probs:
        lf = sample_leaf(ops, order, rng)
        p = prompt_ids(ops)
        seqs.append(p + list(lf.ids) + [EOS])
        sites.append([(len(p) + st.pos, st) for st in lf.sites])
    L = max(len(r) for r in seqs)
    x = np.full((batch, L), PAD, np.int64)
    mw = np.zeros((batch, L), np.float32)
    at = np.full((batch, L), PAD, np.int64)
    aw = np.zeros((batch, L), np.float32)
    for i, r in enumerate(seqs):
        x[i, : len(r)] = r
        mw[i, len(prompt_ids(probs[i])): len(r)] = 1.0
    mt = x.copy()
    for i, ss in enumerate(sites):
        for j, st in ss:
            mt[i, j], mw[i, j], at[i, j], aw[i, j] = st.right, 1.0 - st.p_err, st.wrong, st.p_err
    t = torch.from_numpy
    return t(x), t(mt[:, 1:]), t(mw[:, 1:]), t(at[:, 1:]), t(aw[:, 1:])


def train_chainadd(recipe: ChainRecipe, *, progress: Callable[[int, int], None] | None = None
                   ) -> tuple[Any, dict[str, Any]]:
    """A fresh ``TinyLM`` distilled from the planted law in ``recipe.order``. Returns (lm, log)."""
    import torch

    from agentmill.lm.tiny import TinyConfig, TinyLM

    lm = TinyLM(TinyConfig(layers=recipe.layers, d=recipe.d, heads=recipe.heads, max_len=64, seed=recipe.seed),
                spec=f"tiny:chainadd-{recipe.order}")
    net = lm.model
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=recipe.lr, weight_decay=0.01)
    warm, total = recipe.warmup, recipe.steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(total - warm, 1))))
    rng, losses = np.random.default_rng([recipe.seed, 17]), []
    n0, t0 = torch.get_num_threads(), time.perf_counter()
    torch.set_num_threads(1)
    try:
        for step in range(total):
            x, mt, mw, at, aw = distill_batch(rng, recipe.batch, recipe.order, mix=tuple(recipe.train_mix))
            logp = torch.log_softmax(net(x[:, :-1])[0], -1)
            nll = -(mw * logp.gather(-1, mt[..., None])[..., 0] + aw * logp.gather(-1, at[..., None])[..., 0])
            w = torch.where(aw > 0, recipe.site_weight, 1.0) * ((mw + aw) > 0)
            loss = (w * nll).sum() / w.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if progress is not None and step % 50 == 0:
                progress(step, total)
    finally:
        torch.set_num_threads(n0)
    net.eval()
    return lm, {"losses": losses, "final_loss": float(np.mean(losses[-20:])), "train_s": time.perf_counter() - t0,
                "n_params": lm.info["n_params"]}


# ------------------------------------------------------------------------------------------------- sampling
def sample_traces(lm: Any, prompts: Sequence[Sequence[int]], gen: Any, *, greedy: bool = False,
                  max_new: int = 40) -> tuple[list[list[int]], int]:
    """Traces (token ids, EOS stripped) from equal-length ``prompts`` at T = 1 (or greedy), decoded with the KV
    cache, and the number of generated tokens (the ledger's unit)."""
    import torch

    from agentmill.lm.tiny import TinyCache

    if len({len(p) for p in prompts}) != 1:
        raise ValueError("sample_traces needs prompts of equal length (chainadd prompts are)")
    net = lm.model
    R = len(prompts)
    out: list[list[int]] = [[] for _ in range(R)]
    done = torch.zeros(R, dtype=torch.bool)
    gen_tokens = 0
    n0 = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            cache = TinyCache(lm.cfg.layers)
            logits, _ = net(torch.tensor([list(p) for p in prompts]), cache)
            last = logits[:, -1].double()
            for _ in range(max_new):
                if cache.get_seq_length() >= lm.max_positions:
                    break
                tok = last.argmax(-1) if greedy else torch.multinomial(torch.softmax(last, -1), 1, generator=gen)[:, 0]
                gen_tokens += int((~done).sum())
                for i in torch.nonzero(~done)[:, 0].tolist():
                    t = int(tok[i])
                    if t == EOS:
                        done[i] = True
                    else:
                        out[i].append(t)
                if bool(done.all()):
                    break
                logits, _ = net(tok[:, None], cache)
                last = logits[:, -1].double()
    finally:
        torch.set_num_threads(n0)
    return out, gen_tokens


# ------------------------------------------------------------------------------------------------- the gate
GATE = {"SO": (0.10, 0.20), "UC": (0.55, 0.65), "DF_min": 0.99, "nonsite_min": 0.995, "malformed_max": 0.01}
"""The pre-registered gate (docs/methods/cliff_tokens.md): wrong-digit probability at SO sites in 0.15 ± 0.05, UC in
0.6 ± 0.05, DF ≥ 0.99; correct-token probability at non-site positions ≥ 0.995; malformed traces ≤ 1 %."""


def chain_gate(lm: Any, order: str, *, n_problems: int = 2000, n_sampled: int = 400, seed: int = 1
               ) -> dict[str, Any]:
    """Gate numbers of ``lm`` on held-out problems (teacher-forced on oracle traces; sampled at T = 1 for format)."""
    import torch

    rng = np.random.default_rng([seed, 991])
    per_kind: dict[str, list[float]] = {"DF": [], "UC": [], "SO": []}
    nonsite: list[float] = []
    for s in range(0, n_problems, 256):
        rows = []
        for _ in range(min(256, n_problems - s)):
            ops = sample_problem(rng)
            rows.append((prompt_ids(ops), sample_leaf(ops, order, rng)))
        L = max(len(p) + len(lf.ids) + 1 for p, lf in rows)
        x = torch.full((len(rows), L), PAD, dtype=torch.long)
        for i, (p, lf) in enumerate(rows):
            seq = p + list(lf.ids) + [EOS]
            x[i, : len(seq)] = torch.tensor(seq)
        with torch.no_grad():
            logp = torch.log_softmax(lm.model(x)[0].double(), -1).numpy()
        for i, (p, lf) in enumerate(rows):
            P, seq = len(p), list(lf.ids) + [EOS]
            site_at = {st.pos: st for st in lf.sites}
            for j, tok in enumerate(seq):
                lp = logp[i, P + j - 1]
                if j in site_at:
                    per_kind[site_at[j].kind].append(float(np.exp(lp[site_at[j].wrong])))
                else:
                    nonsite.append(float(np.exp(lp[tok])))
    gen = torch.Generator().manual_seed(seed)
    probs = [sample_problem(rng) for _ in range(n_sampled)]
    texts: list[str] = []
    for s in range(0, n_sampled, 256):
        chunk = probs[s: s + 256]
        tr, _ = sample_traces(lm, [prompt_ids(o) for o in chunk], gen)
        texts += [bytes(t for t in r if t < 256).decode("ascii", errors="replace") for r in tr]
    bad = sum(re.fullmatch(chain_format(order), t) is None for t in texts)
    means = {k: (float(np.mean(v)) if v else float("nan")) for k, v in per_kind.items()}
    res = {"order": order, "p_wrong": means, "sites": {k: len(v) for k, v in per_kind.items()},
           "p_correct_nonsite": float(np.mean(nonsite)), "p_correct_nonsite_min": float(np.min(nonsite)),
           "malformed": bad / n_sampled, "n_problems": n_problems, "n_sampled": n_sampled}
    checks = {"SO": GATE["SO"][0] <= means["SO"] <= GATE["SO"][1],
              "UC": GATE["UC"][0] <= means["UC"] <= GATE["UC"][1],
              "DF": means["DF"] >= GATE["DF_min"],
              "nonsite": res["p_correct_nonsite"] >= GATE["nonsite_min"],
              "malformed": res["malformed"] <= GATE["malformed_max"]}
    res["checks"] = {k: bool(v) for k, v in checks.items()}
    res["passed"] = bool(all(checks.values()))
    return res


def gate_text(g: dict[str, Any]) -> str:
    """One line with the gate numbers, for every claim row that uses the model."""
    pw = g["p_wrong"]
    return (f"chainadd-{g['order']} gate {'passed' if g['passed'] else 'FAILED'}: p_wrong DF {pw['DF']:.3f} (>= 0.99), "
            f"UC {pw['UC']:.3f} (0.60 +- 0.05), SO {pw['SO']:.3f} (0.15 +- 0.05); correct-token "
            f"{g['p_correct_nonsite']:.4f} (>= 0.995); malformed {g['malformed']:.3f} (<= 0.01)")


PACKAGED = Path(__file__).with_name("weights")
"""Shipped trained models (``chainadd-<order>-<key>/``: config.json, model.safetensors, card.json): a recipe found
here is loaded instead of retrained (its gate was measured by :func:`chain_gate` when it was trained)."""


def weights_sha256(path: Path) -> str:
    return hashlib.sha256((Path(path) / "model.safetensors").read_bytes()).hexdigest()


def obtain_chainadd(recipe: ChainRecipe, root: Path, *, gate_problems: int = 2000, gate_sampled: int = 400,
                    progress: Callable[[int, int], None] | None = None, train: bool = True
                    ) -> tuple[Any, dict[str, Any]]:
    """The model of ``recipe`` with its card (recipe, training log, gate): the shipped copy under :data:`PACKAGED`
    if there is one, else (``train``; otherwise FileNotFoundError) trained once and kept under ``root/chainadd-<order>-<key>/`` (safetensors + ``card.json``,
    written atomically). The card returned names where the weights came from and their sha256."""
    from agentmill.core.records import write_json_atomic
    from agentmill.lm.tiny import TinyLM

    name = f"chainadd-{recipe.order}-{recipe.key()}"
    for where, path in (("packaged", PACKAGED / name), ("cache", Path(root) / name)):
        card_path = path / "card.json"
        if not card_path.exists():
            continue
        try:
            card = json.loads(card_path.read_text())
            if card.get("gate", {}).get("n_problems") == gate_problems and card.get("recipe") == asdict(recipe) | {
                    "train_mix": list(recipe.train_mix)}:
                return TinyLM.load(path), card | {"source": where, "weights_sha256": weights_sha256(path)}
        except Exception:  # noqa: BLE001 - a broken cache entry is rebuilt
            pass
    path = Path(root) / name
    if not train:
        raise FileNotFoundError(f"no trained {name} under {PACKAGED} or {root} (train it: agentmill cliff train-tiny)")
    lm, log = train_chainadd(recipe, progress=progress)
    t0 = time.perf_counter()
    gate = chain_gate(lm, recipe.order, n_problems=gate_problems, n_sampled=gate_sampled, seed=recipe.seed + 1)
    card = {"recipe": asdict(recipe) | {"train_mix": list(recipe.train_mix)}, "key": recipe.key(),
            "final_loss": log["final_loss"], "train_s": log["train_s"], "gate_s": time.perf_counter() - t0,
            "n_params": log["n_params"], "gate": gate}
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lm.save(path)
    write_json_atomic(path / "card.json", card)
    return lm, card | {"source": "trained", "weights_sha256": weights_sha256(path)}

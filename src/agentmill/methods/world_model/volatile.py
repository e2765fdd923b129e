"""Volatile content: session data (request ids, timestamps) that no world model can predict, scored by content class.

Under ``envs.wrappers.UniqueObsWrapper(p=1)`` every KeyDoor observation ends in a fresh line
``[request <8 hex> at <ISO timestamp>]``: the id is random, the clock advances 1–90 s per step. Raw exact match
against such text is meaningless (a perfect simulator of the game still misses the id), so the scorer splits each
observation by content class, as the released MCP judge prompt does for "session/private data — format and
plausibility only" [C prompts/mcp/judge_system_prompt.txt]:

- *objective* content (room, items, exits, inventory, feedback) is parsed by the base domain after the volatile
  spans are removed (scrubbed), and factuality compares it exactly;
- *volatile* content is judged only on its form (the strict tag format with a real calendar time) and on not being
  stale (neither the id nor the timestamp copied from the current observation: "not-stale = a volatile value is not
  copied from the previous turn", docs/methods/world_model.md).

:class:`VolatileDomain` wraps any domain with these rules (RuleScorer and ``field_f1`` then work unchanged);
:func:`collect_unique` plays the behaviour policy of ``data.collect_keydoor`` through the wrapper (same seeds, so
the trajectories are the plain table's, tags added); :func:`unique_stage` trains the CPT→SFT recipe on that data
(cached like ``pipeline.stage``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.paths import cache_root
from agentmill.core.seeding import derive_seed
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, generate_layout
from agentmill.envs.wrappers import UniqueObsWrapper
from agentmill.methods.world_model.data import (INVALID_STRINGS, KEYDOOR_MANUAL, WM_WORLD, Transition,
                                                TransitionTable, WMExample, build_examples, cpt_documents)
from agentmill.methods.world_model.domain import KeyDoorDomain, Parsed, keydoor_diff
from agentmill.methods.world_model.format import QwenFormat

VOLATILE_SPAN = re.compile(r"[ \t]*\[request\b[^\]\n]*\]?")
"""Where volatile content sits in a text: anything from ``[request`` to the closing bracket (or the line's end), so a
malformed tag is still classed volatile (and fails the format check) rather than polluting the objective facts."""

VALID_TAG = re.compile(r"^\[request ([0-9a-f]{8}) at (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)\]$")
"""The exact form ``UniqueObsWrapper`` writes."""

PLACEHOLDER = "<volatile>"
"""What scrubbed exact match puts where a volatile span was."""


def volatile_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of volatile content in ``text`` (the ``volatile_spans`` column of a transition table)."""
    return [m.span() for m in VOLATILE_SPAN.finditer(text or "")]


def volatile_values(text: str) -> list[str]:
    """The volatile spans' text, stripped."""
    return [m.group(0).strip() for m in VOLATILE_SPAN.finditer(text or "")]


def scrub(text: str, placeholder: str = "") -> str:
    """``text`` with every volatile span replaced by ``placeholder`` and lines left empty by it dropped."""
    out = VOLATILE_SPAN.sub(placeholder, text or "")
    return "\n".join(ln for ln in out.split("\n") if ln.strip())


def tag_parts(tag: str) -> tuple[str, str] | None:
    """(id, timestamp) of a well-formed tag whose timestamp is a real UTC time, else None."""
    m = VALID_TAG.match(tag.strip())
    if m is None:
        return None
    try:
        datetime.strptime(m.group(2), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return m.group(1), m.group(2)


LOOSE_TAG = re.compile(r"\[request (\S*) at (\S*?)\]?$")
"""The id and time fields of a tag whatever their form (for the "copied" check of malformed tags)."""


def tag_checks(pred: str | None, current: str) -> dict[str, bool]:
    """Volatile-content checks of a predicted observation against the current one (o_t, what the model saw):
    ``present`` (exactly one volatile span), ``valid`` (it has the strict form), ``fresh`` (neither its id nor its
    timestamp equals the current observation's), ``later`` (its timestamp is after the current one; reported, not
    part of the realism check), ``copied`` (its id field, well-formed or not, is the current one's; reported), and
    ``ok`` = present ∧ valid ∧ fresh."""
    vals = volatile_values(pred or "")
    present = len(vals) == 1
    parts = tag_parts(vals[0]) if present else None
    cur_vals = volatile_values(current)
    cur_parts = [c for c in (tag_parts(v) for v in cur_vals) if c is not None]
    fresh = parts is not None and all(parts[0] != c[0] and parts[1] != c[1] for c in cur_parts)
    later = parts is not None and all(parts[1] > c[1] for c in cur_parts)  # ISO strings order as times
    loose = LOOSE_TAG.match(vals[0]) if present else None
    cur_ids = {m.group(1) for m in (LOOSE_TAG.match(v) for v in cur_vals) if m}
    copied = loose is not None and loose.group(1) in cur_ids
    return {"present": present, "valid": parts is not None, "fresh": fresh, "later": later, "copied": copied,
            "ok": present and parts is not None and fresh}


class VolatileDomain:
    """A domain whose observations carry volatile spans: parsing, facts, schema and consistency see the scrubbed
    text; realism adds the volatile checks (form, not stale against the window's last observation). Every other hook
    is the base domain's, on scrubbed text."""

    def __init__(self, base: Any = None) -> None:
        self.base = base if base is not None else KeyDoorDomain()
        self.name = f"{self.base.name}+volatile"
        self.qwen_domain = getattr(self.base, "qwen_domain", None)

    def card(self, task: Any) -> str | None:
        return self.base.card(task)

    def parse(self, obs: str) -> Parsed | None:
        p = self.base.parse(scrub(obs))
        if p is None:
            return None
        return Parsed({**p.fields, "volatile": tuple(volatile_values(obs))}, p.facts, p.lines, p.extra)

    def schema_checks(self, p: Parsed) -> list[bool]:
        return self.base.schema_checks(p) + [len(p.fields.get("volatile", ())) == 1]

    def plausibility_checks(self, p: Parsed, card: str | None, window: Sequence[str]) -> list[bool]:
        vals = p.fields.get("volatile", ())
        tag = "\n".join(vals)
        checks = tag_checks(tag if len(vals) == 1 else None, window[-1] if window else "")
        return self.base.plausibility_checks(p, card, [scrub(w) for w in window]) + [checks["valid"],
                                                                                      checks["fresh"]]

    def consistency_conflicts(self, p: Parsed, window: Sequence[str]) -> tuple[int, int]:
        return self.base.consistency_conflicts(p, [scrub(w) for w in window])

    def reasoning(self, action: str, obs: str, next_obs: str, diff: Sequence[str], check: int | None) -> str:
        return self.base.reasoning(action, scrub(obs), scrub(next_obs), diff, check)

    def outcome_from_observation(self, obs: str, action: str) -> tuple[float, bool]:
        return self.base.outcome_from_observation(scrub(obs), action)

    def admissible_from_text(self, obs: str, card: str | None) -> list[str]:
        return self.base.admissible_from_text(scrub(obs), card)


# ---------------------------------------------------------------------------------------------------------------
# data

def collect_unique(tasks: Sequence[tuple[int, str]], episodes_per_task: int, *, seed: int = 0, p: float = 1.0,
                   config: KeyDoorConfig = WM_WORLD, domain: KeyDoorDomain | None = None) -> TransitionTable:
    """``data.collect_keydoor`` through ``UniqueObsWrapper(p)``: the behaviour policy reads only the true state and
    its own seeded generator, so with the same ``seed`` and tasks the actions (and the objective text) are those of
    the plain table, row for row; only the tags differ. The reasoning is written from the true state diff, so it
    never mentions a tag."""
    domain = domain or KeyDoorDomain()
    rows: list[Transition] = []
    for lseed, split in tasks:
        lay = generate_layout(lseed, config)
        inner = KeyDoorEnv(lay, config)
        env = UniqueObsWrapper(inner, p=p, seed=derive_seed(seed, "wm-unique", lseed))
        card = domain.card(lay)
        for e in range(episodes_per_task):
            rng = np.random.default_rng(derive_seed(seed, "wm-collect", lseed, e))
            mode = "oracle" if rng.random() < 0.55 else "random"
            obs, _ = env.reset(seed=derive_seed(seed, "wm-env", lseed, e))
            done, t = False, 0
            while not done:
                a = _behaviour(inner, rng, mode)
                before = inner.state
                nobs, r, term, trunc, ninfo = env.step(a)
                after = inner.state
                diff = tuple(keydoor_diff(inner, before, after))
                rows.append(Transition("keydoor-unique", lay.task_id, split, f"{lay.task_id}/e{e}", t, lay.objective,
                                       obs, a, nobs, float(r), bool(term), bool(trunc), before != after,
                                       bool(ninfo["invalid_action"]), diff, card, lseed))
                obs, t, done = nobs, t + 1, term or trunc
        env.close()
    return TransitionTable(rows)


def _behaviour(env: KeyDoorEnv, rng: np.random.Generator, mode: str) -> str:
    """The mixed behaviour policy of ``data.collect_keydoor`` (the same draws in the same order)."""
    adm = env.admissible_commands(env.state)
    if mode == "oracle" and rng.random() > 0.3:
        plan = env.plan_commands(env.state)
        if plan:
            return plan[int(rng.integers(len(plan)))]
    if rng.random() < 0.1:
        return INVALID_STRINGS[int(rng.integers(len(INVALID_STRINGS)))]
    return adm[int(rng.integers(len(adm)))]


def row_examples(rows: Sequence[Transition], fmt: QwenFormat, domain: Any, *, seed: int = 0) -> list[WMExample]:
    """One example per row, in order, never deduplicated (so two tables' rows stay paired)."""
    eps: dict[str, list[Transition]] = {}
    for r in rows:
        eps.setdefault(r.episode_id, []).append(r)
    out = []
    for r in rows:
        out.extend(build_examples([r], fmt, domain, seed=seed, episodes=eps))
    return out


# ---------------------------------------------------------------------------------------------------------------
# the CPT→SFT recipe on UniqueObs data (cached)

UNIQUE_VERSION = "1"
"""Bumped whenever the UniqueObs data or its training changes, so a cached model is never served to newer code."""


@dataclass(frozen=True)
class UniqueRecipe:
    """What the UniqueObs world model depends on: the plain pipeline's config (data sizes, model, CPT and SFT steps,
    learning rates) and the wrapper's tag probability."""

    cfg: Any
    """The pipeline's ``WMConfig`` (the same steps as W-1's CPT→SFT)."""
    p: float = 1.0
    """UniqueObsWrapper tag probability."""

    def key(self) -> str:
        c = self.cfg
        fields = ("n_train", "n_cpt", "n_dev", "n_test", "episodes", "seed", "tokenizer", "bpe_vocab", "layers", "d",
                  "heads", "max_len", "batch", "cpt_steps", "cpt_seq", "cpt_lr", "sft_steps", "sft_lr")
        blob = json.dumps({"p": self.p, "v": UNIQUE_VERSION, **{f: getattr(c, f) for f in fields}}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def unique_root(recipe: UniqueRecipe) -> Path:
    return cache_root() / "world_model" / "unique" / recipe.key()


def unique_data(recipe: UniqueRecipe, tasks: Sequence[tuple[int, str]]) -> TransitionTable:
    path = unique_root(recipe) / "transitions.jsonl"
    if path.exists():
        return TransitionTable.from_jsonl(path)
    c = recipe.cfg
    table = collect_unique(tasks, c.episodes, seed=c.seed, p=recipe.p)
    table.to_jsonl(path)
    return table


def unique_stage(recipe: UniqueRecipe, tasks: Sequence[tuple[int, str]], fmt: QwenFormat) -> tuple[Any, dict]:
    """The CPT→SFT world model trained on UniqueObs data with the plain recipe's steps, learning rates, batch and
    model size (its own BPE, trained on its own text as the plain pipeline's is). Cached under
    ``cache_root()/world_model/unique/<key>/`` (temp dir, then rename)."""
    from agentmill.lm.tiny import TinyLM, train_bpe
    from agentmill.methods.world_model.train import StageConfig, new_model, train_cpt, train_sft

    root = unique_root(recipe)
    done = root / "cpt_sft"
    if (done / "log.json").exists():
        return TinyLM.load(done / "model"), json.loads((done / "log.json").read_text())
    c = recipe.cfg
    table = unique_data(recipe, tasks)
    dom = VolatileDomain()
    t0 = time.perf_counter()
    docs = cpt_documents(table.split("cpt"), fmt, KEYDOOR_MANUAL)
    exs = build_examples(table.split("train"), fmt, dom, seed=c.seed)
    bpe = train_bpe(docs + [e.prompt + e.target for e in exs], vocab_size=c.bpe_vocab) if c.tokenizer == "bpe" \
        else None
    lm = new_model(c.layers, c.d, c.heads, c.max_len, c.seed, bpe)
    sup = dict(batch=c.batch, seed=c.seed, seq_len=c.max_len)
    cpt_losses = train_cpt(lm, docs, StageConfig(steps=c.cpt_steps, lr=c.cpt_lr, **{**sup, "seq_len": c.cpt_seq}))
    t1 = time.perf_counter()
    sft_losses = train_sft(lm, exs, StageConfig(steps=c.sft_steps, lr=c.sft_lr, **sup))
    log = {"cpt_losses": cpt_losses, "sft_losses": sft_losses, "docs": len(docs), "examples": len(exs),
           "cpt_seconds": t1 - t0, "seconds": time.perf_counter() - t0, "recipe": {"p": recipe.p,
                                                                                     "cfg": asdict(c)}}
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".cpt_sft.", dir=root))
    lm.save(tmp / "model")
    (tmp / "log.json").write_text(json.dumps(log))
    if done.exists():
        shutil.rmtree(done)
    os.replace(tmp, done)
    return lm, log

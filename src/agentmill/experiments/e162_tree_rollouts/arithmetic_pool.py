"""The checkpointed pool of self-generated arithmetic completions behind E162's LLM checks.

R2 (``collapse_llm``) fits the collapse law on it and R3 (``tree_llm``) calibrates its trees on the same rows, so
both read one checkpoint per (model, prompt style, seed, temperature, samples, token cap): a prompt sampled once is
never sampled again, and a kill mid-write loses at most the prompt being written."""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.records import append_jsonl_checkpoint
from agentmill.envs.arithmetic import STOP_REGEX, example_pair, make_pool
from agentmill.experiments.protocol import RunContext
from agentmill.lm.base import GenerateConfig

SAMPLES_VERSION = "2"
"""Bumped whenever sampling or scoring changes, so checkpointed samples of an older version are not reused
(v2: Gumbel-max sampler)."""


@dataclass(frozen=True)
class PoolSpec:
    """What the sampled rows depend on (and so what names their checkpoint)."""

    prompts: int
    """Arithmetic prompts, spread round-robin over levels 1–7."""
    samples: int
    """Completions per prompt."""
    temperature: float
    max_new_tokens: int
    prompt_style: str = "fewshot"
    """``fewshot`` (a raw few-shot completion prompt) or ``chat`` (the chat-templated user message)."""
    seed: int = 1000
    """Pool and sampling seed (held out: >= 1000)."""


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:100]


def checkpoint_path(s: PoolSpec, ctx: RunContext) -> Path:
    name = (f"samples-v{SAMPLES_VERSION}-{slug(ctx.model)}-{s.prompt_style}-s{s.seed}-T{s.temperature:g}"
            f"-n{s.samples}-m{s.max_new_tokens}.jsonl")
    return ctx.work_dir / name


def read_checkpoint(path: Path) -> dict[str, dict[str, Any]]:
    """Finished prompts by id. A torn last line (a kill mid-write) is cut off the file, so the prompt it held is
    regenerated and its new row starts on a fresh line instead of being glued to the fragment and lost again."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(raw.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())
        raw = raw[: raw.rfind(b"\n") + 1]
    for line in raw.decode("utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a corrupt line in the middle (should not happen with append + fsync): regenerate it
        done[row["prompt_id"]] = row
    return done


def sample_pool(s: PoolSpec, ctx: RunContext) -> list[dict[str, Any]]:
    """Rewards of ``s.samples`` completions per prompt, resumed from the per-prompt checkpoint.

    Two experiments read one pool (R2 and R3's calibration), and the main job may run them at once in two workers:
    an exclusive lock beside the checkpoint makes the second wait for the first and then read its rows, instead of
    sampling the same prompts again and appending duplicates to the same file."""
    if s.prompt_style not in ("fewshot", "chat"):
        raise ValueError(f"prompt_style must be 'fewshot' or 'chat', got {s.prompt_style!r}")
    path = checkpoint_path(s, ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        try:  # released when the file closes, also when this process dies
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ctx.progress("waiting for another run sampling this pool", 0, None)
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _sample_locked(s, ctx, path)


def _sample_locked(s: PoolSpec, ctx: RunContext, path: Path) -> list[dict[str, Any]]:
    tasks = make_pool(s.prompts, s.seed)
    done = read_checkpoint(path)
    todo = [t for t in tasks if t.prompt_id not in done]
    ctx.progress("sampling prompts", len(tasks) - len(todo), len(tasks))
    if todo:
        lm = ctx.load_lm()
        if getattr(lm, "info", None):
            ctx.data["lm_info"] = dict(lm.info)
        cfg_base = dict(n=s.samples, temperature=s.temperature, max_new_tokens=s.max_new_tokens,
                        stop_regex=STOP_REGEX)
        with open(path, "a", encoding="utf-8") as f:
            for t in todo:
                k = tasks.index(t)
                shots = example_pair(t.level, s.seed, k)
                prompt = t.completion_prompt(shots) if s.prompt_style == "fewshot" else t.messages(shots)
                t0 = time.perf_counter()
                outs = lm.generate([prompt], GenerateConfig(seed=s.seed * 100_003 + k, **cfg_base))
                seconds = time.perf_counter() - t0
                rewards = [t.verify(o.text) for o in outs]
                row = {"prompt_id": t.prompt_id, "level": t.level, "answer": t.answer,
                       "rewards": [r.value for r in rewards], "reasons": [r.reason for r in rewards],
                       "tokens": [o.completion_tokens for o in outs], "texts": [o.text[:300] for o in outs],
                       "seconds": round(seconds, 3)}
                append_jsonl_checkpoint(f, row)
                done[t.prompt_id] = row
                ctx.progress("sampling prompts", len(done), len(tasks))
    elif "lm_info" not in ctx.data:
        ctx.data["lm_info"] = {"spec": ctx.model, "note": "all samples from checkpoint"}
    return [done[t.prompt_id] for t in tasks]

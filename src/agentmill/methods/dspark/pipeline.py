"""From nothing to a trained, calibrated drafter for a target, with every stage cached [R].

Stages: corpus of the target's own answers → feature cache → training → STS calibration on held-out (calib) families.
Artifacts live under ``artifacts/dspark/<target fingerprint>/`` (git-ignored; ``AGENTMILL_ARTIFACTS`` moves it) and
each stage is skipped when its output exists for the same inputs. A finished drafter can be exported in fp16 to
``assets/dspark/<name>/`` and committed, so the main job never retrains it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[4]


def artifacts_root(fingerprint: str) -> Path:
    base = Path(os.environ.get("AGENTMILL_ARTIFACTS", REPO / "artifacts"))
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in fingerprint) or "target"
    return base / "dspark" / safe


def asset_dir(name: str = "smollm2-135m") -> Path:
    return REPO / "assets" / "dspark" / name


def tapped_engine(layers: tuple[int, ...], *, threads: int = 2, final_hidden: bool = False,
                  model: str = "smollm2", weights: str = "dense") -> Any:
    """The embedded target with the drafter's layer taps switched on (``tiny`` for tests); ``weights="int8"`` serves
    the int8 engine (the drafter reads that engine's taps)."""
    from agentmill.lm.engine import EngineConfig, LlamaEngine

    ecfg = EngineConfig(threads=threads, tap_layers=tuple(layers), return_final_hidden=final_hidden, weights=weights)
    if model == "tiny":
        from agentmill.lm.engine.tiny import tiny_llama

        return tiny_llama(0, ecfg)
    if model != "smollm2":
        raise ValueError(f"unknown target {model!r} (smollm2 or tiny)")
    return LlamaEngine.smollm2_135m(ecfg)


def pick_mask_token(tokenizer: Any, counts: np.ndarray) -> int:
    """An existing special token that never occurs in the corpus [R] (frozen, as DeepSpec's mask [C]); raises if none
    qualifies."""
    specials = sorted(set(int(i) for i in getattr(tokenizer, "all_special_ids", []) or []))
    extra = [int(i) for i in range(min(32, len(counts)))]
    for t in specials + extra:
        if counts[t] == 0 and t not in (getattr(tokenizer, "eos_token_id", None),
                                        getattr(tokenizer, "bos_token_id", None)):
            return t
    raise ValueError("no unused special token to serve as the mask token; every candidate occurs in the corpus")


def calibration_rounds(spec_engine: Any, prompts: list[list[int]], params: Any, *, progress: Any = None) -> dict:
    """Decode ``prompts`` under full verification and return the recorded rounds (conf logits, accepted)."""
    spec_engine.rounds.clear()
    for p in prompts:
        spec_engine.add_request(p, params)
    while spec_engine.has_work():
        outs = spec_engine.step()
        if progress is not None:
            progress(sum(len(o.token_ids) for o in outs))
    g = spec_engine.max_len
    full = [r for r in spec_engine.rounds if r.verified == g and len(r.conf_logits) == g]
    return {"conf_logits": np.array([r.conf_logits for r in full]).reshape(-1, g),
            "accepted": np.array([r.accepted for r in full], dtype=int)}


def export_fp16(ckpt: Path, out: Path, engine: Any) -> Path:
    """Re-save a drafter with fp16 weights (≤ 25 MB for SmolLM2) for committing under ``assets/``."""
    import torch

    from agentmill.methods.dspark.drafter import DSparkDrafter

    d = DSparkDrafter.load(ckpt, engine)
    cal = {k: v.tolist() for k, v in DSparkDrafter.calibration_of(ckpt).items()}
    meta = json.loads((Path(ckpt) / "train_meta.json").read_text()) if (Path(ckpt) / "train_meta.json").exists() \
        else {}
    d = d.to(torch.float16)
    out.parent.mkdir(parents=True, exist_ok=True)
    path = d.save(out, calibration=cal, train_meta={**meta, "exported_dtype": "float16"})
    return path


def describe(d: Any) -> dict[str, Any]:
    n = sum(p.numel() for p in d.trainable_parameters())
    return {"config": asdict(d.cfg), "trainable_parameters": int(n), "draft_vocab": int(len(d.d2t)),
            "vocab_coverage": d.vocab.coverage}


DEFAULT_DRAFTER = "drafter-r64-s1200"
"""Output name of ``agentmill dspark train`` with its defaults."""


def shipped_drafter(engine: Any) -> Path:
    """The drafter experiments and ``serve`` use by default: the committed fp16 copy under ``assets/dspark/``, else
    the default output of ``agentmill dspark train`` for this target."""
    for p in (asset_dir() / "drafter", artifacts_root(engine.fingerprint) / DEFAULT_DRAFTER):
        if (p / "config.json").exists():
            return p
    raise FileNotFoundError("no trained DSpark drafter for this target: run `agentmill dspark train` (about 30 min "
                            "on 2 cores; every stage is cached)")


def ensure_corpus(engine: Any, n: int, max_new: int, temperature: float, out: Path, *, seed: int = 0,
                  progress: Any = None) -> Path:
    """The corpus of the target's answers to ``n`` training prompts at ``out`` (generated, or completed after an
    interruption, only when it is short)."""
    from agentmill.methods.dspark.data import build_corpus, builtin_prompts

    out = Path(out)
    done = len(out.read_text().splitlines()) if out.exists() else 0
    if done >= n:
        return out
    if progress is not None:
        progress(done)
    return build_corpus(engine, builtin_prompts("train", n, seed=seed), out, temperature=temperature,
                        max_new=max_new, seed=seed, progress=progress)


def ensure_cache(engine: Any, corpus: Path, out: Path, layers: tuple[int, ...], *, progress: Any = None) -> Any:
    from agentmill.methods.dspark.features import build_feature_cache

    return build_feature_cache(engine, corpus, out, layers=layers, progress=progress)

"""E167 performance: the tiny parts of PERF-1, 4, 5 and 6, measured side by side in one run on this machine (the CPU
is named in the record; one torch thread; run alone: ``parallel_safe=False``).

- PERF-1, the greedy cache in sim-RL: D-1's loop (``train_compare``, GRPO, ``SoftmaxTablePolicy`` inside the
  ``SimulatedEnv`` of the hybrid-RL world model) on one layout and one seed with D-1's per-layout budget, with the
  world model's greedy cache on. WM calls = prompts the LM actually decoded. The uncached arm runs the same seed for
  the first ``uncached_iterations`` iterations only: its sequence of simulator queries must equal the cached arm's
  prefix (greedy decoding: the cache changes no result), and then over the whole budget it makes one call per
  simulated step, i.e. as many calls as the cached arm made queries. Its wall time over the whole budget is projected
  from its measured per-call latency (windows of ``window`` consecutive calls): the cached arm's wall minus its own
  decoding time plus queries × latency. Both ratios are therefore "uncached ÷ cached" at D-1's budget.
- PERF-4, step latency: a simulated KeyDoor step (the uncached world model's per-call decoding latency from
  PERF-1) against real steps of KeyDoor, FactSearch and (when a generated game is cached) TextWorld.
  Reported, no target.
- PERF-5, judge throughput: ``RuleScorer`` and ``LexicalRubricJudge`` items per second on KeyDoor test items whose
  completions are template targets with 0–3 corrupted fields, disjoint items per repeat (the parse cache warms only
  within a repeat). ``LogprobJudge`` is not built in this package: not measured.
- PERF-6, tiny CPT throughput: a fresh 3 × 128 model with a BPE (2,048 asked), windows of 512 tokens, batch 6, one
  thread; tokens per second over timed steps after one warm-up step, on a few documents so that ``train_cpt``'s
  per-call encoding stays out of the timing.
- PERF-2, batched prediction: the same hybrid-RL tiny world model, uncached and greedy, predicts the same 16 KeyDoor
  test prompts once with ``predict_batch(batch_size=16)`` and once one prompt at a time (``batch_size=1``); generated
  tokens per second, batched ÷ sequential, per repeat (the two arms alternate which runs first). The SmolLM2 half
  (batch 8 vs one at a time, greedy decode of up to 16 new tokens from 8 short chat prompts) runs at full only.
- PERF-8, FactSearch speed: generating a default world (60 entities + 10 news = 70 pages) including its BM25 index,
  and one ``web_search`` tool call (the env's own, results rendered) on such a world (one world, the entity queries
  of its first 40 questions), per repeat the mean over several fresh worlds and over the queries.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.e167_world_model.stages import TINY_SPEC, wm_config
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged, withhold


@dataclass(frozen=True)
class Setup:
    pipeline: str = "full"
    """Which cached pipeline's hybrid-RL world model PERF-1/PERF-4 simulate with (smoke / quick / full)."""
    wm: str = TINY_SPEC + ": the hybrid-RL stage (D-1's simulator)"
    """The simulator's world model."""
    iterations: int = 50
    """GRPO iterations of the cached arm (× group 8 = D-1's 400 episodes per layout)."""
    group: int = 8
    """Rollouts per group."""
    uncached_iterations: int = 2
    """Iterations the uncached arm actually runs (its prefix of the cached arm's run)."""
    window: int = 10
    """Consecutive uncached calls per latency window (the repeats of the projected wall ratio)."""
    real_steps: int = 2000
    """Real env steps timed per env in PERF-4 (TextWorld: a tenth)."""
    textworld: bool = True
    """Also time real TextWorld steps in PERF-4 (a cached generated game; loading one takes seconds)."""
    judge_items: int = 1200
    """Judged items per repeat in PERF-5."""
    cpt_steps: int = 3
    """Timed CPT steps per repeat in PERF-6."""
    cpt_shape: tuple[int, int, int, int] = (3, 128, 512, 6)
    """PERF-6 model and batch: (layers, d, window tokens, batch); the target is stated for (3, 128, 512, 6)."""
    repeats: int = 3
    """Timing repeats of PERF-5 and PERF-6."""
    judge_perf1: bool = True
    """Judge PERF-1 in this profile (off at quick: a barely trained world model, a four-iteration run)."""
    batch_items: int = 16
    """PERF-2: prompts predicted per arm; the batched arm uses this as its batch size (16 as the target states)."""
    batch_repeats: int = 3
    """PERF-2: repeats of the (sequential, batched) pair."""
    judge_perf2: bool = True
    """Judge PERF-2 (tiny) in this profile (off at quick: 8 prompts, one repeat, to fit the quick budget)."""
    smollm2: bool = True
    """PERF-2: also time SmolLM2 batch 8 vs one at a time (loads ``hf:smollm2``; ≈ 2.5 min; full only)."""
    smollm2_repeats: int = 3
    """PERF-2: repeats of SmolLM2's (sequential, batched) pair."""
    fs_worlds: int = 10
    """PERF-8: worlds generated (and indexed) per repeat."""
    fs_searches: int = 200
    """PERF-8: ``web_search`` calls timed per repeat."""
    fs_repeats: int = 5
    """PERF-8: timing repeats."""


SETUPS = {"smoke": Setup(pipeline="smoke", iterations=2, group=2, uncached_iterations=1, window=3, real_steps=50,
                         judge_items=40, cpt_steps=1, cpt_shape=(1, 32, 64, 2), repeats=2, judge_perf1=False,
                         textworld=False, batch_items=4, batch_repeats=2, judge_perf2=False, smollm2=False,
                         fs_worlds=2, fs_searches=20, fs_repeats=2),
          "quick": Setup(pipeline="quick", iterations=4, group=2, uncached_iterations=1, window=4, real_steps=500,
                         judge_items=400, cpt_steps=1, repeats=3, judge_perf1=False, textworld=False,
                         batch_items=4, batch_repeats=1, judge_perf2=False, smollm2=False, fs_worlds=3,
                         fs_searches=100, fs_repeats=3),
          "full": Setup()}

CLAIMS = (
    Claim("E167-PERF1-calls", "In D-1's sim-RL loop the greedy cache cuts world-model calls at least 10-fold.",
          "[R] performance target", "—", "perf1_call_ratio", ">=", 10.0, judge_on="exact",
          exact_why="a count: LM decodes of one seeded greedy run; uncached calls = simulated steps, the prefix "
                    "check in the record shows the uncached arm queries exactly the cached arm's sequence"),
    Claim("E167-PERF1-wall", "In D-1's sim-RL loop the greedy cache cuts wall time at least 5-fold (uncached wall "
          "projected from its measured per-call latency).", "[R] performance target", "—", "perf1_wall_ratio", ">=",
          5.0),
    Claim("E167-PERF5-rule", "RuleScorer judges at least 5,000 items per second.", "[R] performance target", "—",
          "perf5_rule_items_per_s", ">=", 5000.0),
    Claim("E167-PERF5-lexical", "LexicalRubricJudge judges at least 2,000 items per second.",
          "[R] performance target", "—", "perf5_lexical_items_per_s", ">=", 2000.0),
    Claim("E167-PERF6", "Tiny CPT (3 × 128, 512-token windows, batch 6, BPE) trains at least 2,500 tokens per second "
          "on one thread.", "[R] performance target", "—", "perf6_cpt_tokens_per_s", ">=", 2500.0),
    Claim("E167-PERF2-tiny", "Batched prediction (predict_batch, 16 prompts at once) gives the tiny world model at "
          "least 6 times the generated tokens per second of one prompt at a time.", "[R] performance target", "—",
          "perf2_tiny_batch_speedup", ">=", 6.0),
    Claim("E167-PERF2-smollm2", "SmolLM2 greedy decoding at batch 8 gives at least 3 times the tokens per second of "
          "one prompt at a time.", "[R] performance target; LOG: ≈ 51 vs 12–17 tok/s (HF backend)", "—",
          "perf2_smollm2_batch_speedup", ">=", 3.0),
    Claim("E167-PERF8-world", "A FactSearch world (70 pages, BM25 index included) is generated in at most 50 ms.",
          "[R] performance target", "—", "perf8_world_gen_s", "<=", 0.050),
    Claim("E167-PERF8-search", "One web_search on a 70-page FactSearch world takes at most 2 ms.",
          "[R] performance target", "—", "perf8_search_s", "<=", 0.002),
)


class _CountingLM:
    """Passes ``generate`` through to ``lm``, counting decoded prompts and timing each call."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self.calls = 0
        self.seconds: list[float] = []

    def generate(self, prompts: Any, cfg: Any) -> Any:
        t0 = time.perf_counter()
        out = self.lm.generate(prompts, cfg)
        self.seconds.append((time.perf_counter() - t0) / max(1, len(prompts)))
        self.calls += len(prompts)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lm, name)


class _QueryLog:
    """A predictor wrapper recording a digest of every simulator query, in order."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.keys: list[str] = []

    def predict_next(self, items: Any) -> Any:
        for o, a, _g, _c in items:
            self.keys.append(hashlib.sha256(f"{o}\x00{a}".encode()).hexdigest()[:16])
        return self.inner.predict_next(items)


def perf1(s: Setup, ctx: RunContext) -> dict[str, Any]:
    from agentmill.envs.keydoor import KeyDoorEnv, layouts
    from agentmill.envs.policies import SoftmaxTablePolicy
    from agentmill.methods.g2po.train import train_compare
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.data import WM_WORLD
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.model import GREEDY, WorldModel
    from agentmill.methods.world_model.simulator import SimulatedEnv, WMPredictor

    cfg = wm_config(s.pipeline)
    lm, _ = P.stage(cfg, "rl_hybrid")
    lay = layouts(1, seed=7_000_000, calibrate=(0.05, 0.5), config=WM_WORLD)  # D-1's first unseen layout
    real_f = lambda lay: KeyDoorEnv(lay, WM_WORLD)  # noqa: E731
    out: dict[str, Any] = {}
    for arm, iters in (("cached", s.iterations), ("uncached", s.uncached_iterations)):
        counter = _CountingLM(lm)
        wm = WorldModel(counter, KeyDoorDomain(), P.FMT, dataclasses.replace(GREEDY, max_new_tokens=cfg.rl_max_new))
        if arm == "uncached":
            wm.cache = None
        q = _QueryLog(WMPredictor(wm))
        t0 = time.perf_counter()
        log = train_compare(lambda lay: SimulatedEnv(q, lay, WM_WORLD), lay, SoftmaxTablePolicy, ("grpo",),
                            group_size=s.group, tasks_per_iter=1, iterations=iters, lr=1.0, seeds=(0,),
                            eval_every=iters, eval_episodes=8, eval_env_factory=real_f)
        wall = time.perf_counter() - t0
        out[arm] = {"wall_s": wall, "calls": counter.calls, "queries": len(q.keys), "keys": q.keys,
                    "decode_s": float(sum(counter.seconds)), "latencies": counter.seconds,
                    "train_success": log.arm("grpo", 0).train_success,
                    "cache": {"hits": wm.cache.hits, "misses": wm.cache.misses} if wm.cache else None}
        ctx.progress("PERF-1 sim-RL", 1 if arm == "cached" else 2, 2)
    return out


def real_step_latency(s: Setup) -> dict[str, float]:
    """Seconds per real step (uniformly random admissible commands, resets included in the count of steps)."""
    from agentmill.envs.factsearch import make_factsearch
    from agentmill.envs.keydoor import KeyDoorEnv, generate_layout
    from agentmill.methods.world_model.data import WM_WORLD

    rng = np.random.default_rng(0)

    def time_env(env: Any, n: int) -> float:
        obs, info = env.reset(seed=0)
        t0 = time.perf_counter()
        for _ in range(n):
            adm = info["admissible_commands"]
            if not adm:
                obs, info = env.reset(seed=int(rng.integers(1 << 30)))
                continue
            obs, r, term, trunc, info = env.step(adm[int(rng.integers(len(adm)))])
            if term or trunc:
                obs, info = env.reset(seed=int(rng.integers(1 << 30)))
        return (time.perf_counter() - t0) / n

    out = {"keydoor": time_env(KeyDoorEnv(generate_layout(7_000_001, WM_WORLD), WM_WORLD), s.real_steps),
           "factsearch": time_env(make_factsearch(world_seed=3, question=1), max(10, s.real_steps // 4))}
    games = sorted(glob.glob(str(_cache_root() / "textworld" / "*" / "*.z8"))) if s.textworld else []
    games = [g for g in games if Path(g).with_suffix(".json").is_file()]
    if games:
        from agentmill.envs.textworld_env import TextWorldEnv

        env = TextWorldEnv(games[0], max_steps=40)
        try:
            out["textworld"] = time_env(env, max(10, s.real_steps // 10))
        finally:
            env.close()
    return out


def _cache_root() -> Path:
    from agentmill.core.paths import cache_root

    return cache_root()


def judge_items(n: int, repeat: int) -> list[Any]:
    """``n`` KeyDoor judge items (template targets, 0–3 fields corrupted) from layouts no other repeat uses."""
    from agentmill.methods.world_model.data import collect_keydoor
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.format import QwenFormat
    from agentmill.methods.world_model.judges import JudgeItem

    dom = KeyDoorDomain()
    base = 8_000_000 + 1000 * repeat
    rows, k = [], 0
    while len(rows) * 4 < n:
        rows += collect_keydoor([(base + k + j, "test") for j in range(10)], 2, seed=repeat).rows
        k += 10
    rng = np.random.default_rng(repeat)
    items = []
    for r in rows:
        for c in range(4):
            pred = dom.corrupt(r.next_obs, c, rng) if c else r.next_obs
            text = QwenFormat.target(pred, dom.reasoning(r.action, r.obs, r.next_obs, r.diff, c))
            items.append(JudgeItem(text, r.next_obs, (r.obs,), r.card))
    return items[:n]


def judge_rates(s: Setup) -> dict[str, list[float]]:
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.judges import LexicalRubricJudge, RuleScorer

    judges = {"rule": RuleScorer(KeyDoorDomain()), "lexical": LexicalRubricJudge(KeyDoorDomain(), sees="raw")}
    rates: dict[str, list[float]] = {k: [] for k in judges}
    for rep in range(s.repeats):
        for j, (name, judge) in enumerate(judges.items()):
            items = judge_items(s.judge_items, 2 * rep + j)  # fresh texts for every judge and repeat
            t0 = time.perf_counter()
            for it in items:
                judge.score(it)
            rates[name].append(len(items) / (time.perf_counter() - t0))
    return rates


def cpt_rates(s: Setup) -> tuple[list[float], dict[str, Any]]:
    from agentmill.lm.tiny import train_bpe
    from agentmill.methods.world_model.data import KEYDOOR_MANUAL, collect_keydoor, cpt_documents
    from agentmill.methods.world_model.format import QwenFormat
    from agentmill.methods.world_model.train import StageConfig, new_model, train_cpt

    layers, d, seq, batch = s.cpt_shape
    rows = collect_keydoor([(9_000_000 + j, "cpt") for j in range(24)], 2, seed=0).rows
    docs = cpt_documents(rows, QwenFormat(), KEYDOOR_MANUAL)
    bpe = train_bpe(docs, vocab_size=2048)
    lm = new_model(layers, d, 4 if d % 4 == 0 else 1, 2 * seq, 0, bpe)
    n_params = sum(p.numel() for p in lm.model.parameters())
    # train_cpt encodes its documents on every call: a few documents (≈ 6k tokens, ≈ 20 ms to encode) keep that out
    # of the timed steps; windows are drawn from them at random as from any corpus.
    timed_docs = docs[:8]
    stream = sum(len(lm.encode(x)) + 2 for x in timed_docs)
    train_cpt(lm, timed_docs, StageConfig(steps=1, batch=batch, seq_len=seq, lr=1e-3))  # warm-up (lazy init)
    rates = []
    for rep in range(s.repeats):
        t0 = time.perf_counter()
        train_cpt(lm, timed_docs, StageConfig(steps=s.cpt_steps, batch=batch, seq_len=seq, lr=1e-3, seed=rep + 1))
        rates.append(s.cpt_steps * batch * seq / (time.perf_counter() - t0))
    return rates, {"params": int(n_params), "vocab": bpe.get_vocab_size(), "layers": layers, "d": d, "batch": batch,
                   "seq_len": seq, "steps_per_repeat": s.cpt_steps, "timed_stream_tokens": int(stream)}


def batch_rates(s: Setup) -> dict[str, Any]:
    """PERF-2 tiny: generated tokens per second of ``predict_batch`` at batch ``batch_items`` and at batch 1."""
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.model import GREEDY, WorldModel

    cfg = wm_config(s.pipeline)
    lm, _ = P.stage(cfg, "rl_hybrid")
    prompts = [e.prompt for e in P.eval_examples(cfg, "test", n=s.batch_items)][:s.batch_items]
    wm = WorldModel(lm, KeyDoorDomain(), P.FMT, dataclasses.replace(GREEDY, max_new_tokens=cfg.rl_max_new))
    wm.cache = None  # every prompt is decoded in both arms
    wm.predict_batch(prompts[:2], batch_size=2)  # warm-up
    seq, bat, texts = [], [], {}
    for rep in range(s.batch_repeats):
        arms = ("seq", "batch") if rep % 2 == 0 else ("batch", "seq")
        for arm in arms:
            t0 = time.perf_counter()
            preds = wm.predict_batch(prompts, batch_size=1 if arm == "seq" else len(prompts))
            dt = time.perf_counter() - t0
            (seq if arm == "seq" else bat).append((sum(p.n_tokens for p in preds), dt))
            texts[arm] = [p.text for p in preds]
    ratios = [(tb / db) / (ts / ds) for (ts, ds), (tb, db) in zip(seq, bat)]
    return {"ratios": ratios, "seq": seq, "batch": bat, "n_prompts": len(prompts),
            "identical_texts": texts.get("seq") == texts.get("batch"), "max_new_tokens": cfg.rl_max_new}


def smollm2_rates(s: Setup) -> dict[str, Any]:
    """PERF-2 SmolLM2: greedy decode tokens per second at batch 8 and one prompt at a time."""
    from agentmill.core.types import Message
    from agentmill.lm import load_lm
    from agentmill.lm.base import GenerateConfig

    t0 = time.perf_counter()
    lm = load_lm("hf:smollm2")
    load_s = time.perf_counter() - t0
    topics = ("a locked door", "a red key", "a dusty pantry", "an old chest", "a narrow hall", "a quiet study",
              "a brass lamp", "a deep well")
    # chat messages: a bare string prompt gets no chat template and SmolLM2 answers it with an immediate EOS
    prompts = [[Message("user", f"Describe {t} in two sentences.")] for t in topics]
    # 16 new tokens, 3 repeats: ≈ 2.5 min under this host's load (a 32-token repeat alone took 75 s)
    gen = GenerateConfig(temperature=0.0, max_new_tokens=16, seed=0)
    lm.generate(prompts[:1], dataclasses.replace(gen, max_new_tokens=4))  # warm-up
    seq, bat = [], []
    for rep in range(s.smollm2_repeats):
        arms = ("seq", "batch") if rep % 2 == 0 else ("batch", "seq")
        for arm in arms:
            t0 = time.perf_counter()
            comps = ([c for p in prompts for c in lm.generate([p], gen)] if arm == "seq" else lm.generate(prompts, gen))
            dt = time.perf_counter() - t0
            (seq if arm == "seq" else bat).append((sum(c.completion_tokens for c in comps), dt))
    ratios = [(tb / db) / (ts / ds) if ts > 0 and tb > 0 else float("nan") for (ts, ds), (tb, db) in zip(seq, bat)]
    return {"ratios": ratios, "seq": seq, "batch": bat, "load_s": load_s, "batch_size": len(prompts),
            "max_new_tokens": gen.max_new_tokens}


def factsearch_speed(s: Setup) -> dict[str, list[float]]:
    """PERF-8: seconds per world generation (index built) and per ``web_search`` call, one mean per repeat."""
    from agentmill.envs.factsearch import FactWorld, make_factsearch

    gen, search = [], []
    env = make_factsearch(world_seed=61_000, question=0)  # one searched world (its questions cost ≈ 0.2 s to list)
    queries = [q for qu in env.world.questions()[:40] for q in env.world.entity_queries(qu)]
    queries = [queries[i % len(queries)] for i in range(s.fs_searches)]
    env.tool_output("web_search: " + queries[0])  # warm-up (tokeniser caches)
    for rep in range(s.fs_repeats):
        t0 = time.perf_counter()
        for w in range(s.fs_worlds):
            world = FactWorld.generate(60_000 + 100 * rep + w)
            _ = world.index  # BM25 is built lazily on the first search: count it as part of generation
        gen.append((time.perf_counter() - t0) / s.fs_worlds)
        t0 = time.perf_counter()
        for q in queries:
            env.tool_output("web_search: " + q)
        search.append((time.perf_counter() - t0) / len(queries))
    return {"world_gen_s": gen, "search_s": search, "pages": len(env.world.pages), "n_queries": len(queries)}


def _windows(lat: list[float], w: int) -> list[float]:
    lat = list(lat)
    k = len(lat) // w
    return [float(np.mean(lat[i * w:(i + 1) * w])) for i in range(k)] or ([float(np.mean(lat))] if lat else [])


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import torch

    from agentmill.core.machine import host_cpu

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    phases: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        p1 = perf1(s, ctx)
        t1 = time.perf_counter()
        real = real_step_latency(s)
        t2 = time.perf_counter()
        ctx.progress("PERF-4/5/6", 1, 3)
        rates = judge_rates(s)
        t3 = time.perf_counter()
        ctx.progress("PERF-4/5/6", 2, 3)
        cpt, cpt_info = cpt_rates(s)
        t4 = time.perf_counter()
        ctx.progress("PERF-4/5/6", 3, 3)
        p2 = batch_rates(s)
        t5 = time.perf_counter()
        p8 = factsearch_speed(s)
        t6 = time.perf_counter()
        p2s = None
        if s.smollm2:
            ctx.progress("PERF-2 SmolLM2", 0, 1)
            p2s = smollm2_rates(s)
        t7 = time.perf_counter()
        phases = {"perf1": t1 - t0, "perf4": t2 - t1, "perf5": t3 - t2, "perf6": t4 - t3, "perf2_tiny": t5 - t4,
                  "perf8": t6 - t5, "perf2_smollm2": t7 - t6}
    finally:
        torch.set_num_threads(threads)
    c, u = p1["cached"], p1["uncached"]
    prefix_ok = c["keys"][:len(u["keys"])] == u["keys"] and u["calls"] == u["queries"]
    lat = _windows(u["latencies"], s.window)
    non_decode = c["wall_s"] - c["decode_s"]
    projected = [(non_decode + c["queries"] * x) / c["wall_s"] for x in lat]
    sim_step = float(np.mean(u["latencies"])) if u["latencies"] else float("nan")
    out: dict[str, Estimate] = {
        "perf1_call_ratio": Estimate.exact(c["queries"] / max(1, c["calls"]), n=c["queries"]),
        "perf1_wall_ratio": repeats_estimate(projected, log=True) if len(projected) > 1 else
        Estimate.exact(projected[0] if projected else float("nan")),
        "perf1_hit_rate": Estimate.exact(1 - c["calls"] / max(1, c["queries"]), n=c["queries"]),
        "perf1_cached_wall_s": Estimate.exact(c["wall_s"]),
        "perf1_uncached_latency_s": repeats_estimate(lat) if len(lat) > 1 else Estimate.exact(sim_step),
        "perf4_sim_step_s": Estimate.exact(sim_step, n=len(u["latencies"])),
        "perf5_rule_items_per_s": repeats_estimate(rates["rule"], log=True),
        "perf5_lexical_items_per_s": repeats_estimate(rates["lexical"], log=True),
        "perf6_cpt_tokens_per_s": repeats_estimate(cpt, log=True)}
    for env, sec in real.items():
        out[f"perf4_real_step_s_{env}"] = Estimate.exact(sec)
        out[f"perf4_sim_over_real_{env}"] = Estimate.exact(sim_step / sec if sec > 0 else float("nan"))
    ctx.data.update({
        "cpu": host_cpu(), "loadavg_at_end": list(os.getloadavg()), "torch_threads": 1, "phase_seconds": phases,
        "perf1": {arm: {k: v for k, v in d.items() if k not in ("keys", "latencies")} for arm, d in p1.items()},
        "perf1_prefix_identical": prefix_ok, "perf1_uncached_windows_s": lat,
        "perf1_note": "uncached wall over the whole budget projected from the measured per-call latency of its "
                      f"{s.uncached_iterations}-iteration prefix run",
        "perf4_real_step_s": real, "perf4_note": "sim step = the KeyDoor tiny world model (uncached, one call); no "
                                                  "FactSearch or TextWorld world model is timed",
        "perf5_rates": rates, "perf5_logprob_judge": "not built: the package has no LogprobJudge (SmolLM2 "
                                                     "parts: not run)",
        "perf6_rates": cpt, "perf6": cpt_info})
    out["perf2_tiny_batch_speedup"] = (repeats_estimate(p2["ratios"], log=True) if len(p2["ratios"]) > 1 else
                                       Estimate.exact(p2["ratios"][0]))
    out["perf8_world_gen_s"] = repeats_estimate(p8["world_gen_s"], log=True)
    out["perf8_search_s"] = repeats_estimate(p8["search_s"], log=True)
    ctx.data.update({"perf2_tiny": p2, "perf8": p8})
    if p2s is not None:
        ctx.data["perf2_smollm2"] = p2s
        if all(np.isfinite(r) and r > 0 for r in p2s["ratios"]):  # else not recorded: the claim is inconclusive
            out["perf2_smollm2_batch_speedup"] = repeats_estimate(p2s["ratios"], log=True)
    else:
        withhold(ctx.data, ["perf2_smollm2_batch_speedup"], "the SmolLM2 half of PERF-2 runs at full only (loads "
                                                            "hf:smollm2)")
    if not s.judge_perf2:
        out = unjudged(out, ["perf2_tiny_batch_speedup"], f"{s.batch_items} prompts (batch {s.batch_items}, the "
                       f"target is stated for 16), {s.batch_repeats} repeat(s); PERF-2 is judged at full", ctx.data)
    if not prefix_ok:
        ctx.data["precondition"] = ("precondition not met: the uncached arm's simulator queries differ from the "
                                    "cached arm's prefix, so its calls cannot be counted from the cached run")
        out.pop("perf1_call_ratio")
        out.pop("perf1_wall_ratio")
    elif not s.judge_perf1:
        out = unjudged(out, ["perf1_call_ratio", "perf1_wall_ratio"],
                       f"{s.pipeline} pipeline: a barely trained world model and a {s.iterations}-iteration run; "
                       "PERF-1 is judged at full (D-1's budget)", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    real = data.get("perf4_real_step_s")
    p1 = data.get("perf1")
    if not real or not p1:
        return []
    from agentmill.experiments.plotting import pyplot, save

    lat = data.get("perf1_uncached_windows_s") or []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.0))
    bars = {f"real {k}": v for k, v in real.items()}
    if lat:
        bars["simulated KeyDoor (tiny WM)"] = float(np.mean(lat))
    ax.barh(list(bars), list(bars.values()), color="tab:blue")
    ax.set_xscale("log")
    ax.set_xlabel("seconds per step (log)")
    ax.set_title("PERF-4: simulated vs real step latency", fontsize=9)
    fig.tight_layout()
    p = out / "perf4_step_latency.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e167.wm_perf",
    quick_budget_s=20,
    title="E167 performance: greedy simulator cache, step latency, judge throughput, tiny CPT throughput",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    parallel_safe=False,
    scale_note="wall-clock on this machine (CPU and load average in the record), one torch thread. PERF-1: one "
               "unseen layout, one seed, D-1's 400 episodes with the cache; the uncached arm runs a 2-iteration "
               "prefix and its whole-budget wall is projected. PERF-2: tiny hybrid-RL world model, 16 KeyDoor "
               "prompts; SmolLM2 (hf:smollm2, fp32) batch 8 at full only. PERF-8: default 70-page FactSearch "
               "worlds. PERF-3/7 and the LogprobJudge part are not built here.",
)

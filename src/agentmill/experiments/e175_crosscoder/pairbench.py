"""What the tool-pair experiments (CX-4 … CX-13) share on the tiny tool pair: the pair with its gates, the weak
checkpoint, the crosscoders trained on it, paired scoring, and the crosscoder recipes both substrates use. Not an
experiment (no ``EXPERIMENT``). The SmolLM2 arm (the default at full) is :mod:`.smolbench`, with this interface.

Substrate here: ``tiny_tool_pair`` — two byte-level TinyLMs (4 blocks × 64), the planted fallback instrument used
when the SmolLM2 sibling fails its gates, and by the smoke profile. Crosscoders: layer 2 (block output), all prompt
rows of the training prompts (position 0 excluded), D = 256, k = 16: CC (BatchTopK), DFC (BatchTopK +
Partition(0.05, 0.05)) and E175 (``CrossCoderConfig.e175(p=0.10, k=16, D=256)``), on (weak checkpoint, base) and a
DFC on (final sibling, base). Artefacts are content-addressed under ``cache_root()/crosscoder``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.experiments.protocol import PRECONDITION_NOT_MET

SMOLLM2_NOTE = ("precondition not met: SmolLM2 tool sibling not trained and gated on this machine (`agentmill run "
                "e175.crosscoder_organism_gate_smollm2 --profile full` does it); claims are judged on the "
                "tiny_tool_pair fallback instead")


def smollm2_note() -> str:
    """What the SmolLM2 arm of a tool-pair claim is: its recorded gates when the sibling has been gated here."""
    from agentmill.methods.crosscoder.sibling import find_gates, gates_text

    g = find_gates()
    if g is None:
        return SMOLLM2_NOTE
    if not g["passed"]:
        return (f"precondition not met on SmolLM2: {gates_text(g)}; claims are judged on the tiny_tool_pair "
                "fallback instead")
    return (f"SmolLM2 sibling passed its gates ({gates_text(g)}); this record is the tiny_tool_pair's (setup "
            "substrate=tiny)")


SUBSTRATE = "tiny_tool_pair (byte TinyLM 4×64; planted fallback)"


@dataclass(frozen=True)
class PairSetup:
    """Fields every tool-pair experiment shares (sizes of the pair, crosscoders and evaluation)."""

    plan_only: bool = False
    """Quick: record the plan, train and measure nothing."""
    base_steps: int = 1200
    sibling_steps: int = 1500
    """1,500 (recipe v2): the 600-step v1 failed its gates (README deviation 2)."""
    pair_batch: int = 16
    n_train_tool: int = 1200
    n_train_decoy: int = 100
    n_train_generic: int = 400
    snapshot_steps: tuple[int, ...] = (10, 20, 40, 80, 160, 320, 640)
    layer: int = 2
    """Block whose output the crosscoders read."""
    dict_size: int = 256
    k: int = 16
    cc_steps: int = 1500
    n_test: int = 200
    n_dev: int = 100
    n_fresh: int = 200
    max_new: int = 96
    """Greedy cap in bytes (the gold call is ≤ 70 bytes)."""
    ignore_gates: bool = False
    """Smoke only: run the measurement even when the gates fail (smoke is never judged)."""
    seed: int = 0
    substrate: str = "tiny"
    """``tiny`` (this module's :class:`Bench`) or ``smollm2`` (:mod:`.smolbench`, which falls back to the tiny pair
    when the SmolLM2 sibling fails its gates)."""


SMOKE = dict(base_steps=10, sibling_steps=10, pair_batch=8, n_train_tool=40, n_train_decoy=8, n_train_generic=16,
             snapshot_steps=(5, 10), n_test=8, n_dev=4, max_new=24, cc_steps=20, ignore_gates=True)
"""The smoke sizes every tool-pair experiment uses (a 20-step pair: its gates fail, the code path runs)."""


def pair_config(s: PairSetup) -> Any:
    from agentmill.methods.crosscoder.toolpair import ToolPairConfig

    return ToolPairConfig(base_steps=s.base_steps, sibling_steps=s.sibling_steps, batch=s.pair_batch,
                          n_tool=s.n_train_tool, n_decoy=s.n_train_decoy, n_generic=s.n_train_generic,
                          n_bare=max(1, s.n_train_tool // 12), snapshot_steps=tuple(s.snapshot_steps), seed=s.seed)


def root() -> Path:
    from agentmill.core.paths import cache_root

    return cache_root() / "crosscoder"


class Bench:
    """The pair, its gates, weak checkpoint and crosscoders for one setup (built lazily, cached on disk)."""

    name = "tiny tool pair"
    harnesses = ("chat",)
    """The tiny pair has one compact rendering, named ``chat`` here so experiments read both benches alike."""

    def __init__(self, setup: PairSetup, ctx: Any) -> None:
        from agentmill.core.records import write_json_atomic
        from agentmill.methods.crosscoder.organism import Gates, compute_gates, make_prompts
        from agentmill.methods.crosscoder.toolpair import build_tool_pair

        self.s, self.ctx = setup, ctx
        ctx.progress("tiny tool pair", 0, None)
        self.pair = build_tool_pair(pair_config(setup), root() / "toolpair")
        self.test = {c: make_prompts(c, setup.n_test if c == "tool" else max(2, setup.n_test // 2), split="test",
                                     seed=setup.seed + 2) for c in ("tool", "decoy", "bare", "generic")}
        self.dev = make_prompts("tool", setup.n_dev, split="test", seed=setup.seed + 1)
        gate_file = self.pair.root / f"gates-{setup.n_test}-{setup.seed}-{setup.max_new}.json"
        if gate_file.exists():  # greedy and deterministic: computed once per pair and test split
            self.gates = Gates(**json.loads(gate_file.read_text()))
        else:
            self.gates = compute_gates(lambda ps: self.generate(self.pair.sibling, ps),
                                       lambda ps: self.generate(self.pair.base, ps), self.test["tool"],
                                       self.test["generic"])
            write_json_atomic(gate_file, asdict(self.gates))
        ctx.data["substrate"] = SUBSTRATE
        ctx.data["gates"] = asdict(self.gates) | {"passed": self.gates.passed}
        ctx.data["gate_text"] = self.gates.text()
        ctx.data["pair_card"] = self.pair.card
        ctx.data["smollm2_arm"] = smollm2_note()
        self._weak: Any = None
        self._cc: dict[str, Any] = {}

    @property
    def usable(self) -> bool:
        return self.gates.passed or self.s.ignore_gates

    def generate(self, lm: Any, prompts: Any, intervention: Any = None, *, harness: str = "chat") -> list[str]:
        from agentmill.methods.crosscoder.toolpair import greedy

        _one_harness(harness)
        return greedy(lm, prompts, max_new=self.s.max_new, intervention=intervention, batch=256)

    def weak(self) -> Any:
        """The earliest snapshot whose dev strict_format lies in [0.15, 0.45] (else the closest to 0.30)."""
        if self._weak is None:
            from agentmill.lm.tiny import load as load_tiny
            from agentmill.methods.crosscoder.toolcalls import score_tool_call

            from agentmill.core.records import write_json_atomic

            rate_file = self.pair.root / f"dev-rates-{self.s.n_dev}-{self.s.seed}-{self.s.max_new}.json"
            if rate_file.exists():
                rates = {int(k): v for k, v in json.loads(rate_file.read_text()).items()}
            else:
                rates = {}
                for step, path in sorted(self.pair.snapshots.items()):
                    outs = self.generate(load_tiny(str(path)), self.dev)
                    rates[step] = float(np.mean([score_tool_call(o, gold_name=p.gold_name,
                                                                 tools=p.tools).strict_format
                                                 for o, p in zip(outs, self.dev)]))
                write_json_atomic(rate_file, {str(k): v for k, v in rates.items()})
            inside = [st for st, r in rates.items() if 0.15 <= r <= 0.45]
            pick = inside[0] if inside else min(rates, key=lambda st: abs(rates[st] - 0.30))
            self._weak = load_tiny(str(self.pair.snapshots[pick]))
            self.ctx.data["weak_checkpoint"] = {"step": pick, "dev_strict_format": rates[pick],
                                                "dev_rates": {str(k): v for k, v in rates.items()},
                                                "in_band": bool(inside)}
        return self._weak

    def sibling(self, which: str) -> Any:
        return self.weak() if which == "weak" else self.pair.sibling

    def crosscoder(self, arch: str, which: str) -> Any:
        """``arch`` ∈ {CC, DFC, E175, E175_free, E175p05, E175p05_free} on (``which`` ∈ {weak, final}, base);
        cached by content address."""
        key = f"{arch}-{which}"
        if key in self._cc:
            return self._cc[key]
        from agentmill.methods.crosscoder import CrossCoder, train_crosscoder
        from agentmill.methods.crosscoder.toolpair import collect_pair_rows, train_prompts

        s = self.s
        cfg = crosscoder_config(s, arch)
        a = self.sibling(which)
        step = self.ctx.data.get("weak_checkpoint", {}).get("step") if which == "weak" else "final"
        addr = hashlib.sha256(json.dumps({"pair": self.pair.card["address"], "which": str(step), "layer": s.layer,
                                          "cfg": asdict(cfg)}, sort_keys=True, default=str).encode()).hexdigest()[:16]
        path = root() / "cc" / addr
        if (path / "config.json").exists():
            cc = CrossCoder.load(path)
        else:
            prompts = [p for ps in train_prompts(pair_config(s)).values() for p in ps]
            rows = collect_pair_rows(a, self.pair.base, prompts, s.layer)
            cc, log = train_crosscoder(rows["x"], cfg)
            x = rows["x"] * np.asarray(cc.scales, np.float32)[None, :, None]
            cc.identity = {"pair": self.pair.card["address"], "sibling": str(step), "layer": s.layer,
                           "means": x.mean(0).tolist()}
            cc.save(path)
        self._cc[key] = cc
        return cc

    def means(self, cc: Any) -> np.ndarray:
        return np.asarray(cc.identity["means"], np.float32)

    def last_rows(self, a: Any, prompts: Any, *, harness: str = "chat") -> dict[str, np.ndarray]:
        from agentmill.methods.crosscoder.toolpair import collect_pair_rows

        _one_harness(harness)
        return collect_pair_rows(a, self.pair.base, prompts, self.s.layer, last_only=True)


def _one_harness(harness: str) -> None:
    if harness != "chat":
        raise ValueError(f"the tiny tool pair has one rendering ('chat'), not {harness!r}")


def crosscoder_config(s: PairSetup, arch: str) -> Any:
    """The crosscoder recipe ``arch`` ∈ {CC, DFC, E175, E175_free, E175p05, E175p05_free} at the setup's sizes."""
    from agentmill.methods.crosscoder import CrossCoderConfig, Partition

    if arch == "CC":
        return CrossCoderConfig(dict_size=s.dict_size, k=s.k, steps=s.cc_steps, warmup=min(100, s.cc_steps // 10),
                                 dead_window=20_000, seed=s.seed)
    if arch == "DFC":
        return CrossCoderConfig(dict_size=s.dict_size, k=s.k, steps=s.cc_steps, partition=Partition(0.05, 0.05),
                                 warmup=min(100, s.cc_steps // 10), dead_window=20_000, seed=s.seed)
    if arch in ("E175", "E175_free"):
        return CrossCoderConfig.e175(p=0.10, k=s.k, dict_size=s.dict_size,
                                      lambda_excl=0.0 if arch == "E175_free" else 1e-3).scaled(steps=s.cc_steps)
    if arch in ("E175p05", "E175p05_free"):  # CX-11's pair: partition (0.05, 0.05), λ_excl 1e-3 vs 0
        return CrossCoderConfig.e175(p=0.05, k=s.k, dict_size=s.dict_size,
                                      lambda_excl=0.0 if arch.endswith("_free") else 1e-3).scaled(steps=s.cc_steps)
    raise ValueError(f"unknown crosscoder arch {arch!r}")


def score(outs: list[str], prompts: Any) -> dict[str, np.ndarray]:
    """Per-prompt 0/1 arrays of every tool score field."""
    from agentmill.methods.crosscoder.toolcalls import score_tool_call

    sc = [score_tool_call(o, gold_name=p.gold_name, tools=p.tools, gold_args=p.gold_args) for o, p in
          zip(outs, prompts)]
    return {k: np.array([float(getattr(x, k)) for x in sc]) for k in
            ("strict_format", "tool_exact", "lax_format", "lax_tool")} | {
        "overall": np.array([float(x.overall) for x in sc])}


def paired(a: np.ndarray, b: np.ndarray, n_boot: int = 10_000, seed: int = 0, level: float = 0.95) -> Any:
    """Paired bootstrap of mean(a) − mean(b) over prompts."""
    from agentmill.core.stats import paired_diff

    return paired_diff(a, b, n_boot=n_boot, seed=seed, level=level)


def run_routing(b: Any, arch: str, *, harness: str = "chat", clean: dict[str, np.ndarray] | None = None
                ) -> dict[str, Any]:
    """CX-5's routing run (CX-11 reuses it): the weak sibling clean and routed through ``arch`` at the last prompt
    token, joint encoding (B's activation on the same tokens); per-prompt scores of both (``clean`` given: reused)."""
    from agentmill.methods.crosscoder.interventions import Joint, route

    a = b.weak()
    cc = b.crosscoder(arch, "weak")
    prompts = b.test["tool"]
    rows = b.last_rows(a, prompts, harness=harness)
    joint = Joint({(i, int(rows["pos"][i])): rows["x"][i, 1] for i in range(len(prompts))})
    if clean is None:
        clean = score(b.generate(a, prompts, harness=harness), prompts)
    recon = score(b.generate(a, prompts, lambda P: route(a, cc, layer=b.s.layer, view=0, positions="last_prompt",
                                                          encode_from=joint, prompt_len=P), harness=harness), prompts)
    return {"clean": clean, "recon": recon}


def plan(ctx: Any, what: str) -> dict[str, Any]:
    from agentmill.experiments.e175_crosscoder.smolbench import CLAIM_SUBSTRATE

    ctx.data["plan_only"] = (f"quick runs no tool-pair work: {what} is judged at full on the SmolLM2 tool sibling "
                             f"(trained, gated and cached under cache_root()); the tiny_tool_pair fallback if the "
                             f"sibling fails its gates")
    ctx.data["substrate"] = CLAIM_SUBSTRATE
    return {}


def top_latents(b: Bench, which: str, n_rank: int) -> tuple[Any, Any, Any]:
    """(crosscoder, FeatureTable of its A-exclusive block, code firing rates on tool prompts)."""
    from agentmill.methods.crosscoder.diagnostics import encode_rows
    from agentmill.methods.crosscoder.features import rank_features
    from agentmill.methods.crosscoder.organism import make_prompts

    a = b.sibling(which)
    cc = b.crosscoder("DFC", which)
    rt = b.last_rows(a, make_prompts("tool", n_rank, seed=b.s.seed))
    rg = b.last_rows(a, make_prompts("generic", n_rank, seed=b.s.seed))
    sc = np.asarray(cc.scales, np.float32)[None, :, None]
    ft, _ = encode_rows(cc, rt["x"] * sc)
    fg, _ = encode_rows(cc, rg["x"] * sc)
    a_excl = cc.blocks()["a_excl"]
    b.ctx.data["a_excl_alive_on_ranking"] = {
        "alive": int(((ft[:, a_excl] > 0).any(0) | (fg[:, a_excl] > 0).any(0)).sum()),
        "of": int(a_excl.stop - a_excl.start), "prompts_per_side": n_rank}
    return cc, rank_features(ft, fg, a_excl), (ft > 0).mean(0)


def dead_block_note(data: dict[str, Any]) -> str | None:
    """The precondition note when no A-exclusive latent fires on any ranking prompt (then "the top latent" is a
    tie among dead latents: ablating or reading it measures nothing), else None."""
    a = data.get("a_excl_alive_on_ranking")
    if a is None or a["alive"] > 0:
        return None
    return (f"{PRECONDITION_NOT_MET}: no A-exclusive latent of the DFC fires on any of the {a['prompts_per_side']} "
            f"tool or {a['prompts_per_side']} generic ranking prompts (0 of {a['of']} alive; per-block liveness on "
            "the training rows in `crosscoders`)")


def gate_bars(data: dict[str, Any], out_path: Path, title: str) -> list[Path]:
    """The four CX-4 gates as bars against their thresholds (blue: passed, red: failed); [] without gates."""
    from agentmill.experiments.plotting import pyplot, save

    if "gates" not in data:
        return []
    plt = pyplot()
    g = data["gates"]
    names = ["sib strict", "sib tool", "base strict", "sib generic tag"]
    vals = [g["sibling_strict_format"], g["sibling_tool_exact"], g["base_strict_format"],
            g["sibling_generic_tag_rate"]]
    lims = [(0.80, ">="), (0.60, ">="), (0.05, "<="), (0.10, "<=")]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(names, vals, color=["#4477aa" if (v >= t if d == ">=" else v <= t) else "#cc6677"
                               for v, (t, d) in zip(vals, lims)])
    for i, (t, _) in enumerate(lims):
        ax.hlines(t, i - 0.4, i + 0.4, color="k", ls="--", lw=0.8)
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.tick_params(axis="x", labelsize=7)
    return [save(fig, out_path)]

"""The SmolLM2 arm of the tool-pair experiments (CX-5 … CX-13): SmolLM2-135M-Instruct (B) against its SFT tool
sibling (A, :mod:`agentmill.methods.crosscoder.sibling`), with the interface of :class:`pairbench.Bench` so each
experiment reads either substrate. Not an experiment (no ``EXPERIMENT``).

The spec's default organism setup [R]: block L = 15 (LoRA starts at block 8, so L ≥ 10), crosscoders on all prompt
tokens of 1,000 training prompts (600 tool, 100 decoy, 300 generic; position 0 and rows with ‖h‖ > 10× the median
norm excluded, counted), D = 1,024, k = 32: CC (BatchTopK), DFC (BatchTopK + Partition(0.05, 0.05)) and the
E175-faithful recipe; evaluation greedy on the test split, 64 new tokens, stop at ``</tool_call>`` or end of turn,
two harnesses: ``chat`` (the chat template the sibling was trained in) and ``raw`` (the tool list and request as
plain text, no template: E175's harness). The weak checkpoint is the sibling's own rule
(:func:`~agentmill.methods.crosscoder.sibling.weak_checkpoint`).

:func:`make_bench` returns this bench when the sibling passes its CX-4 gates and the tiny pair otherwise (the
pre-registered fallback), so no claim ever reads a sibling that failed its gates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import asdict
from typing import Any

import numpy as np

from agentmill.experiments.e175_crosscoder.pairbench import Bench, root

SMOL_SUBSTRATE = ("SmolLM2-135M-Instruct (B) vs its SFT tool sibling (A: LoRA r 8 on blocks 8–29), block 15, "
                  "chat template")
CLAIM_SUBSTRATE = "SmolLM2-135M vs its SFT tool sibling, block 15 (tiny_tool_pair if the sibling fails its gates)"
"""How claims name their substrate; every record names the one it ran on (``substrate``)."""
SMOL = dict(substrate="smollm2", layer=15, dict_size=1024, k=32, cc_steps=1500, max_new=64)
"""Sizes of the SmolLM2 arm (full profiles set them; the rest of ``PairSetup`` is shared)."""
LAYERS_COLLECTED = (11, 15, 22)
"""Blocks whose activations one collection pass stores for the weak checkpoint (CX-13 reads 11 and 22)."""
TRAIN_ROWS = {"tool": 600, "decoy": 100, "generic": 300}
"""Crosscoder training prompts (the first of each category of the sibling's own training set)."""


def tiny_setup(setup: Any) -> Any:
    """``setup`` with the tiny pair's sizes in place of the SmolLM2 arm's (the fallback)."""
    d = type(setup)()
    names = {f.name for f in dataclasses.fields(setup)} & (set(SMOL) | {"layers"})
    return dataclasses.replace(setup, **{k: getattr(d, k) for k in names})


def make_bench(setup: Any, ctx: Any) -> Any:
    """The bench a tool-pair experiment reads: SmolLM2 when ``setup.substrate == "smollm2"`` and its sibling passes
    the gates, else the tiny tool pair (with the SmolLM2 gate line recorded beside it)."""
    if getattr(setup, "substrate", "tiny") != "smollm2":
        return Bench(setup, ctx)
    sb = SmolBench(setup, ctx)
    if sb.gates.passed:
        return sb
    ctx.data["smollm2_fallback"] = f"SmolLM2 sibling failed its gates ({sb.gates.text()}): tiny_tool_pair instead"
    return Bench(tiny_setup(setup), ctx)


class _Pair:
    """``bench.pair``: the base and the final sibling, loaded on first use."""

    def __init__(self, bench: SmolBench) -> None:
        self._b = bench
        self._sibling: Any = None

    @property
    def base(self) -> Any:
        return self._b.base

    @property
    def sibling(self) -> Any:
        if self._sibling is None:
            from agentmill.methods.crosscoder import sibling as S

            self._sibling = S.load_sibling(self._b.sib.adapter, self._b.cfg.base)
        return self._sibling


class SmolBench:
    """The SmolLM2 pair, its gates, weak checkpoint and crosscoders for one setup (built lazily, cached on disk)."""

    name = "SmolLM2 tool sibling"
    harnesses = ("raw", "chat")
    """E175's raw harness first (CX-5's primary), then the chat template the sibling was trained in."""

    def __init__(self, setup: Any, ctx: Any) -> None:
        from agentmill.methods.crosscoder import sibling as S

        self.s, self.ctx = setup, ctx
        self.cfg = S.SiblingConfig(seed=setup.seed)
        ctx.progress("SmolLM2 tool sibling (trained once, cached)", 0, None)
        self.sib = S.build_tool_sibling(self.cfg, progress=lambda d: ctx.progress("LoRA steps", d["step"],
                                                                                   d["steps"]))
        self.gates, g = S.sibling_gates(self.sib, self.cfg, n_test=setup.n_test, max_new=setup.max_new,
                                        seed=setup.seed)
        ctx.read_artefact(self.sib.adapter / "adapter_model.safetensors")
        self.test = S.test_split(setup.seed, setup.n_test)
        self.dev = S.dev_split(setup.seed, setup.n_dev)
        ctx.data["substrate"] = SMOL_SUBSTRATE
        ctx.data["gates"] = {k: v for k, v in g.items() if k != "examples"} | {"adapter": self.sib.adapter.name}
        ctx.data["gate_text"] = S.gates_text(ctx.data["gates"])
        ctx.data["sibling_card"] = {k: v for k, v in self.sib.card.items() if k not in ("losses", "hyper")}
        self._base: Any = None
        self._weak: Any = None
        self.pair = _Pair(self)
        self._cc: dict[str, Any] = {}

    @property
    def usable(self) -> bool:
        return self.gates.passed

    @property
    def base(self) -> Any:
        if self._base is None:
            from agentmill.methods.crosscoder import sibling as S

            self._base = S.load_base(self.cfg.base)
        return self._base

    # ------------------------------------------------------------------------------------------------ models
    def weak(self) -> Any:
        """The weak checkpoint (earliest snapshot with dev strict_format in [0.15, 0.45], else the closest)."""
        if self._weak is None:
            from agentmill.methods.crosscoder import sibling as S

            w = S.weak_checkpoint(self.sib, self.cfg, n_dev=self.s.n_dev, max_new=self.s.max_new, seed=self.s.seed)
            self.ctx.data["weak_checkpoint"] = w
            self._weak = S.load_sibling(self.sib.snapshots[int(w["step"])], self.cfg.base)
        return self._weak

    def sibling(self, which: str) -> Any:
        return self.weak() if which == "weak" else self.pair.sibling

    def _step(self, which: str) -> str:
        if which == "weak":
            self.weak()
            return str(self.ctx.data["weak_checkpoint"]["step"])
        return "final"

    # ------------------------------------------------------------------------------------------------ prompts
    def encode(self, harness: str = "chat") -> Any:
        from agentmill.methods.crosscoder import sibling as S

        if harness == "chat":
            return lambda lm, p: S.prompt_ids(lm.tokenizer, p)
        if harness == "raw":
            return lambda lm, p: S.raw_prompt_ids(lm.tokenizer, p)
        raise ValueError(f"harness must be 'chat' or 'raw', got {harness!r}")

    def generate(self, lm: Any, prompts: Any, intervention: Any = None, *, harness: str = "chat") -> list[str]:
        """Greedy outputs in prompt order, one batch (row i of the batch is prompt i, as joint encodings keyed by
        (row, position) need), cut after the first ``</tool_call>``."""
        from agentmill.methods.crosscoder import sibling as S
        from agentmill.methods.crosscoder.toolpair import greedy_ids

        enc = self.encode(harness)
        ids = [enc(lm, p) for p in prompts]
        outs = greedy_ids(lm, ids, max_new=self.s.max_new, intervention=intervention, batch=max(1, len(ids)))
        return [S.cut(o) for o in outs]

    def last_rows(self, a: Any, prompts: Any, *, harness: str = "chat") -> dict[str, np.ndarray]:
        from agentmill.methods.crosscoder.toolpair import collect_pair_rows

        return collect_pair_rows(a, self.base, prompts, self.s.layer, last_only=True, batch=32,
                                 encode=self.encode(harness))

    # ------------------------------------------------------------------------------------------------ crosscoders
    def train_rows(self, which: str, layer: int) -> dict[str, Any]:
        """Paired rows of (``which`` sibling, base) at ``layer`` on the crosscoder training prompts, outliers
        dropped; cached on disk per (adapter, checkpoint, layer)."""
        from agentmill.core.records import write_json_atomic
        from agentmill.methods.crosscoder import sibling as S
        from agentmill.methods.crosscoder.toolpair import collect_pair_rows, drop_outliers

        step = self._step(which)
        layers = LAYERS_COLLECTED if layer in LAYERS_COLLECTED else (layer,)
        key = hashlib.sha256(json.dumps({"adapter": self.sib.adapter.name, "step": step, "layers": layers,
                                         "rows": TRAIN_ROWS, "seed": self.s.seed}).encode()).hexdigest()[:16]
        d = root() / "smol_rows" / key
        f = d / f"layer{layer}.npz"
        if not f.exists():
            all_p = S.train_prompts(self.cfg)
            prompts = [p for c, n in TRAIN_ROWS.items() for p in [q for q in all_p if q.category == c][:n]]
            self.ctx.progress(f"paired activations ({which}, blocks {layers})", 0, None)
            rows = collect_pair_rows(self.sibling(which), self.base, prompts, layers, batch=16,
                                     encode=self.encode("chat"))
            d.mkdir(parents=True, exist_ok=True)
            meta = {"n_prompts": len(prompts), "layers": list(layers), "dropped": {}}
            for L in layers:
                kept, dropped = drop_outliers({"x": rows["x"][L], "doc": rows["doc"], "pos": rows["pos"],
                                               "last": rows["last"], "label": rows["label"]})
                meta["dropped"][str(L)] = dropped
                tmp = d / f"layer{L}.tmp.npz"
                np.savez(tmp, **kept)
                tmp.replace(d / f"layer{L}.npz")
            write_json_atomic(d / "meta.json", meta)
        meta = json.loads((d / "meta.json").read_text())
        z = np.load(f)
        self.ctx.data.setdefault("train_rows", {})[f"{which}-L{layer}"] = {
            "rows": int(z["x"].shape[0]), "dropped_outliers": meta["dropped"][str(layer)],
            "prompts": meta["n_prompts"]}
        return {k: z[k] for k in z.files}

    def crosscoder(self, arch: str, which: str) -> Any:
        """``arch`` ∈ {CC, DFC, E175, E175p05, E175p05_free} on (``which`` ∈ {weak, final}, base) at the setup's
        layer; cached by content address."""
        key = f"{arch}-{which}-{self.s.layer}"
        if key in self._cc:
            return self._cc[key]
        from agentmill.methods.crosscoder import CrossCoder, train_crosscoder
        from agentmill.experiments.e175_crosscoder.pairbench import crosscoder_config

        cfg = crosscoder_config(self.s, arch)
        step = self._step(which)
        addr = hashlib.sha256(json.dumps({"sibling": self.sib.adapter.name, "which": step, "layer": self.s.layer,
                                          "rows": TRAIN_ROWS, "cfg": asdict(cfg)}, sort_keys=True,
                                         default=str).encode()).hexdigest()[:16]
        path = root() / "cc" / f"smol-{addr}"
        rows = None
        if (path / "config.json").exists():
            cc = CrossCoder.load(path)
        else:
            rows = self.train_rows(which, self.s.layer)
            self.ctx.progress(f"crosscoder {arch} ({which}, block {self.s.layer})", 0, None)
            cc, _ = train_crosscoder(rows["x"], cfg)
            x = rows["x"] * np.asarray(cc.scales, np.float32)[None, :, None]
            cc.identity = {"sibling": self.sib.adapter.name, "step": step, "layer": self.s.layer,
                           "means": x.mean(0).tolist()}
            cc.save(path)
        self.ctx.data.setdefault("crosscoders", {})[key] = {"path": path.name, **self.liveness(cc, path, which, rows)}
        self._cc[key] = cc
        return cc

    def liveness(self, cc: Any, path: Any, which: str, rows: dict[str, Any] | None = None) -> dict[str, Any]:
        """Latents per block that fire on at least one of every 10th training row, and the mean L0 there (cached
        beside the crosscoder): a dead exclusive block means the shared latents absorbed the A/B difference."""
        from agentmill.core.records import write_json_atomic
        from agentmill.methods.crosscoder.diagnostics import encode_rows

        f = path / "liveness.json"
        if f.exists():
            return json.loads(f.read_text())
        x = (rows if rows is not None else self.train_rows(which, self.s.layer))["x"][::10]
        codes, _ = encode_rows(cc, x * np.asarray(cc.scales, np.float32)[None, :, None])
        fired = (codes > 0).any(0)
        out = {"alive": {name: int(fired[sl].sum()) for name, sl in cc.blocks().items()},
               "of": {name: int(sl.stop - sl.start) for name, sl in cc.blocks().items()},
               "l0": float((codes > 0).sum(1).mean()), "rows_read": int(len(x)),
               "relative_ab_difference": float(np.linalg.norm(x[:, 0] - x[:, 1], axis=1).mean()
                                               / np.linalg.norm(x[:, 1], axis=1).mean())}
        write_json_atomic(f, out)
        return out

    def means(self, cc: Any) -> np.ndarray:
        return np.asarray(cc.identity["means"], np.float32)

"""The DSpark drafter (arXiv:2607.05147 [A]; DeepSpec [C]): a parallel block backbone fed by target
hidden states, the low-rank sequential (Markov) correction head, and the confidence head.

Why this shape (arXiv:2607.05147; DeepSpec ``modeling/dspark``): the backbone drafts a whole block in one forward —
cheap, but its positions are conditionally independent, so acceptance decays along the block. The Markov head adds
a bias ``B(x_{k-1}, ·) = W2(W1[x_{k-1}])`` that lets each position see the token actually drafted before it, at the
cost of one lookup and one r × N_d mat-vec per position. The confidence head predicts, for every position, the
chance that the target accepts it given that the earlier ones were accepted; the scheduler multiplies these into
prefix survivals.

Layout as DeepSpec's ``modeling/dspark`` [C]: context features ``ctx = hidden_norm(fc([h^(l1); …; h^(lm)]))`` from the
target's layer taps; Qwen3-style draft layers whose queries come only from the block and whose keys/values are the
concatenation of the context's and the block's (bidirectional inside the block); block input ``[anchor, M, …, M]`` at
positions ``a … a+γ−1``, slot k predicting the token at ``a+k``. ``embed_tokens`` and the LM head are frozen copies of
the target's (the LM head restricted to the draft vocabulary D).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class DSparkConfig:
    """Drafter architecture; defaults in docs/methods/dspark.md (CPU-sized where the paper's would not fit)."""

    block_size: int = 7
    num_draft_layers: int = 2
    target_layer_ids: tuple[int, ...] = (1, 10, 19, 28)
    markov_rank: int = 64
    markov_head_type: Literal["vanilla"] = "vanilla"
    confidence_head: bool = True
    confidence_head_with_markov: bool = True
    draft_vocab_size: int | None = 8192
    mask_token_id: int | None = None
    qk_norm: bool = True

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.num_draft_layers < 1 or not self.target_layer_ids:
            raise ValueError("block_size and num_draft_layers must be >= 1 and target_layer_ids non-empty")
        if self.markov_rank < 0:
            raise ValueError("markov_rank must be >= 0 (0 = no correction head)")
        if self.markov_head_type != "vanilla":
            raise ValueError("only the vanilla Markov head is implemented (gated/rnn are optional here)")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DSparkConfig:
        d = dict(d)
        d["target_layer_ids"] = tuple(d["target_layer_ids"])
        return cls(**d)


@dataclass
class TargetShape:
    """What the drafter copies from the target: widths, RoPE, and the frozen embedding / LM head."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    num_layers: int
    fingerprint: str = ""

    @classmethod
    def of(cls, engine: Any) -> TargetShape:
        c = engine.model_config
        return cls(c.vocab_size, c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim,
                   c.rms_norm_eps, c.rope_theta, c.num_layers, getattr(engine, "fingerprint", ""))


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rope(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    f = positions.float()[..., None] * inv
    emb = torch.cat([f, f], -1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class DraftLayer(nn.Module):
    """A Qwen3-style decoder layer with KV injection: queries from the block, keys/values from context + block."""

    def __init__(self, t: TargetShape, qk_norm: bool):
        super().__init__()
        d, hd = t.hidden_size, t.head_dim
        self.nq, self.nkv, self.hd, self.theta = t.num_heads, t.num_kv_heads, hd, t.rope_theta
        self.q_proj = nn.Linear(d, self.nq * hd, bias=False)
        self.k_proj = nn.Linear(d, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nq * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, t.rms_norm_eps) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(hd, t.rms_norm_eps) if qk_norm else nn.Identity()
        self.gate_proj = nn.Linear(d, t.intermediate_size, bias=False)
        self.up_proj = nn.Linear(d, t.intermediate_size, bias=False)
        self.down_proj = nn.Linear(t.intermediate_size, d, bias=False)
        self.input_layernorm = RMSNorm(d, t.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(d, t.rms_norm_eps)

    def context_kv(self, ctx: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of context features ``ctx [..., n, d]`` at absolute positions ``pos [..., n]`` → ``[..., nkv, n, hd]``
        (RoPE applied): computed once per context row and cached at inference."""
        k = self.k_norm(self.k_proj(ctx).unflatten(-1, (self.nkv, self.hd)))
        v = self.v_proj(ctx).unflatten(-1, (self.nkv, self.hd))
        cos, sin = rope(pos, self.hd, self.theta)
        k = apply_rope(k, cos[..., None, :], sin[..., None, :])
        return k.transpose(-3, -2), v.transpose(-3, -2)

    def forward(self, h: torch.Tensor, pos: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        """``h [B, n, d]`` block states at ``pos [B, n]``; ``kc, vc [B, nkv, c, hd]`` context K/V; ``mask [B, 1, n,
        c + n]`` (True = may attend) or None (everything visible)."""
        x = self.input_layernorm(h)
        q = self.q_norm(self.q_proj(x).unflatten(-1, (self.nq, self.hd)))
        kb, vb = self.context_kv(x, pos)
        cos, sin = rope(pos, self.hd, self.theta)
        q = apply_rope(q, cos[..., None, :], sin[..., None, :]).transpose(1, 2)
        k = torch.cat([kc, kb], 2)
        v = torch.cat([vc, vb], 2)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.nkv != self.nq)
        h = h + self.o_proj(o.transpose(1, 2).flatten(-2))
        x = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@dataclass
class DraftVocab:
    """The reduced draft vocabulary D (FR-Spec / EAGLE-3 ``d2t`` practice): ``d2t[i]`` is the target id of draft
    index i; ``t2d[v]`` is the draft index of target id v or −1."""

    d2t: torch.Tensor
    vocab_size: int
    coverage: float = 1.0

    @property
    def t2d(self) -> torch.Tensor:
        t2d = torch.full((self.vocab_size,), -1, dtype=torch.long)
        t2d[self.d2t] = torch.arange(len(self.d2t))
        return t2d

    @classmethod
    def full(cls, vocab_size: int) -> DraftVocab:
        return cls(torch.arange(vocab_size), vocab_size, 1.0)

    @classmethod
    def from_counts(cls, counts: np.ndarray, size: int, always: tuple[int, ...] = ()) -> DraftVocab:
        """The ``size`` most frequent corpus tokens plus ``always`` (specials); coverage = share of corpus tokens
        inside D (> 95% expected [R])."""
        V = len(counts)
        if size >= V:
            return cls.full(V)
        order = np.argsort(-counts, kind="stable")
        keep = list(dict.fromkeys([int(t) for t in always] + [int(t) for t in order]))[:size]
        keep.sort()
        cov = float(counts[keep].sum() / max(counts.sum(), 1))
        return cls(torch.tensor(keep, dtype=torch.long), V, cov)


class DSparkDrafter(nn.Module):
    """Backbone + Markov head + confidence head. Trainable: draft layers, fc, hidden_norm, norm, both heads."""

    def __init__(self, cfg: DSparkConfig, t: TargetShape, vocab: DraftVocab, embed: torch.Tensor,
                 lm_head: torch.Tensor):
        super().__init__()
        if cfg.mask_token_id is None:
            raise ValueError("DSparkConfig.mask_token_id must be set (an unused special token of the target)")
        self.cfg, self.t, self.vocab = cfg, t, vocab
        d, m = t.hidden_size, len(cfg.target_layer_ids)
        self.register_buffer("embed_tokens", embed.detach().float().clone(), persistent=False)
        self.register_buffer("lm_head", lm_head.detach().float()[vocab.d2t].clone(), persistent=False)
        self.register_buffer("d2t", vocab.d2t.clone(), persistent=False)
        self.register_buffer("t2d", vocab.t2d, persistent=False)
        self.fc = nn.Linear(m * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, t.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(t, cfg.qk_norm) for _ in range(cfg.num_draft_layers))
        self.norm = RMSNorm(d, t.rms_norm_eps)
        r = cfg.markov_rank
        if r:
            self.markov_w1 = nn.Embedding(t.vocab_size, r)
            self.markov_w2 = nn.Linear(r, len(vocab.d2t), bias=False)
            # W1 keeps nn.Embedding's N(0, 1) init: with std 0.02 the gradient reaching the zero-initialised W2 was
            # so small that 1,200 steps left the bias at std 0.09 logits (the shipped drafter; see docs/LOG.md)
            nn.init.zeros_(self.markov_w2.weight)   # starts as "no correction" [R], for the equal-compute ablation
        if cfg.confidence_head:
            self.conf_proj = nn.Linear(d + (r if cfg.confidence_head_with_markov else 0), 1)
        for layer in self.layers:
            for mod in layer.modules():
                if isinstance(mod, nn.Linear):
                    nn.init.normal_(mod.weight, std=0.02)
        nn.init.normal_(self.fc.weight, std=0.02)

    # ------------------------------------------------------------------ construction
    @classmethod
    def init_for(cls, engine: Any, cfg: DSparkConfig, vocab: DraftVocab | None = None,
                 seed: int = 0) -> DSparkDrafter:
        t = TargetShape.of(engine)
        if max(cfg.target_layer_ids) >= t.num_layers or min(cfg.target_layer_ids) < -1:
            raise ValueError(f"target_layer_ids {cfg.target_layer_ids} outside [-1, {t.num_layers - 1}]")
        torch.manual_seed(seed)
        vocab = vocab or DraftVocab.full(t.vocab_size)
        return cls(cfg, t, vocab, engine.model.embed, engine.model.head_weight)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ pieces
    def context(self, taps: torch.Tensor) -> torch.Tensor:
        """``taps [..., m·d]`` → projected, normalised context features ``[..., d]``."""
        return self.hidden_norm(self.fc(taps.float()))

    def block_input(self, anchors: torch.Tensor) -> torch.Tensor:
        """``[anchor, M, …, M]`` embeddings for anchors ``[...]`` → ``[..., γ, d]``."""
        g = self.cfg.block_size
        ids = torch.full((*anchors.shape, g), int(self.cfg.mask_token_id), dtype=torch.long)
        ids[..., 0] = anchors
        return self.embed_tokens[ids]

    def base_logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(h), self.lm_head)

    def markov_features(self, prev: torch.Tensor) -> torch.Tensor | None:
        return self.markov_w1(prev) if self.cfg.markov_rank else None

    def heads(self, h_normed: torch.Tensor, base: torch.Tensor, prev: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Corrected logits over D and confidence logits for previous tokens ``prev`` (target ids)."""
        w1 = self.markov_features(prev)
        logits = base + self.markov_w2(w1) if w1 is not None else base
        z = None
        if self.cfg.confidence_head:
            feats = h_normed if (w1 is None or not self.cfg.confidence_head_with_markov) else torch.cat([h_normed, w1],
                                                                                                        -1)
            z = self.conf_proj(feats).squeeze(-1)
        return logits, z

    # ------------------------------------------------------------------ persistence
    def save(self, path: Path, *, calibration: dict[str, list[float]] | None = None,
             train_meta: dict[str, Any] | None = None) -> Path:
        """Atomic directory: config.json, model.safetensors (trainable tensors, fp16 by default is NOT used: fp32
        keeps resumed training exact), draft_vocab.pt (d2t), calibration.json, train_meta.json."""
        from safetensors.torch import save_file

        path = Path(path)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=path.parent if path.parent.exists() else None))
        try:
            state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
            save_file(state, str(tmp / "model.safetensors"))
            torch.save({"d2t": self.vocab.d2t, "vocab_size": self.vocab.vocab_size,
                        "coverage": self.vocab.coverage}, tmp / "draft_vocab.pt")
            (tmp / "config.json").write_text(json.dumps({"dspark": asdict(self.cfg), "target": asdict(self.t)},
                                                        indent=1))
            (tmp / "calibration.json").write_text(json.dumps(calibration or {}, indent=1))
            (tmp / "train_meta.json").write_text(json.dumps(train_meta or {}, indent=1, default=str))
            if path.exists():
                old = path.with_name(path.name + ".old")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def load(cls, path: Path, engine: Any) -> DSparkDrafter:
        """Load a drafter for ``engine``; refuses a checkpoint made for a different target shape."""
        from safetensors.torch import load_file

        path = Path(path)
        meta = json.loads((path / "config.json").read_text())
        cfg = DSparkConfig.from_dict(meta["dspark"])
        t = TargetShape.of(engine)
        saved = TargetShape(**meta["target"])
        for f in ("vocab_size", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "num_layers"):
            if getattr(saved, f) != getattr(t, f):
                raise ValueError(f"drafter at {path} was trained for a target with {f}={getattr(saved, f)}, "
                                 f"this target has {getattr(t, f)}")
        v = torch.load(path / "draft_vocab.pt", weights_only=True)
        vocab = DraftVocab(v["d2t"], int(v["vocab_size"]), float(v["coverage"]))
        model = cls(cfg, t, vocab, engine.model.embed, engine.model.head_weight)
        state = {k: t_.float() for k, t_ in load_file(str(path / "model.safetensors")).items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or [k for k in missing if not k.startswith(("embed_tokens", "lm_head", "d2t", "t2d"))]:
            raise ValueError(f"checkpoint {path} does not match the drafter: missing {missing}, unexpected "
                             f"{unexpected}")
        return model

    @staticmethod
    def calibration_of(path: Path) -> dict[str, np.ndarray]:
        p = Path(path) / "calibration.json"
        d = json.loads(p.read_text()) if p.exists() else {}
        return {k: np.asarray(v, dtype=np.float64) for k, v in d.items()}


# ---------------------------------------------------------------------- training forward
@dataclass
class TrainBatch:
    """Padded sequences of the feature cache with sampled anchors.

    ``taps [B, L, m·d]``, ``tokens [B, L]``, ``anchors [B, A]`` (positions; −1 = unused), ``p [B, A, γ, N_d]``
    target probabilities on D for slot k (the target's row at position a+k−1), ``p_out [B, A, γ]`` target mass
    outside D, ``labels [B, A, γ]`` (token at a+k, target id), ``valid [B, A, γ]`` supervised-slot mask."""

    taps: torch.Tensor
    tokens: torch.Tensor
    anchors: torch.Tensor
    p: torch.Tensor
    p_out: torch.Tensor
    labels: torch.Tensor
    valid: torch.Tensor


@dataclass
class TrainOut:
    loss: torch.Tensor
    parts: dict[str, float] = field(default_factory=dict)


def train_attention_mask(anchors: torch.Tensor, L: int, g: int) -> torch.Tensor:
    """``[B, 1, A·γ, L + A·γ]``: the block of anchor a sees context positions < a and every slot of its own block
    (``create_dspark_attention_mask`` semantics); unused anchors (−1) see only their own block."""
    B, A = anchors.shape
    ctx_pos = torch.arange(L)
    a = anchors.clamp_min(0)[:, :, None, None]                                   # [B, A, 1, 1]
    ctx = (ctx_pos[None, None, None, :] < a).expand(B, A, g, L)                  # [B, A, g, L]
    own = torch.eye(A, dtype=torch.bool)[:, None, :, None].expand(A, g, A, g).reshape(A, g, A * g)
    own = own[None].expand(B, A, g, A * g)
    m = torch.cat([ctx, own], -1).reshape(B, A * g, L + A * g)
    return m[:, None]


def forward_train(model: DSparkDrafter, batch: TrainBatch, *, loss_decay_gamma: float = 4.0,
                  ce_alpha: float = 0.1, l1_alpha: float = 0.9, conf_alpha: float = 1.0) -> TrainOut:
    """The three losses of DeepSpec's ``loss.py`` [C], teacher-forced, each normalised by its own weighted count."""
    g = model.cfg.block_size
    B, L = batch.tokens.shape
    A = batch.anchors.shape[1]
    ctx = model.context(batch.taps)                                               # [B, L, d]
    ctx_pos = torch.arange(L)[None].expand(B, L)
    a = batch.anchors.clamp_min(0)
    pos = (a[:, :, None] + torch.arange(g)).reshape(B, A * g)                      # [B, A·g]
    anchor_tok = batch.tokens.gather(1, a)                                         # [B, A]
    h = model.block_input(anchor_tok).reshape(B, A * g, -1)
    mask = train_attention_mask(batch.anchors, L, g)
    for layer in model.layers:
        kc, vc = layer.context_kv(ctx, ctx_pos)
        h = layer(h, pos, kc, vc, mask)
    hn = model.norm(h).reshape(B, A, g, -1)
    base = F.linear(hn, model.lm_head)                                             # [B, A, g, N_d]
    # teacher forcing: the previous token of slot k is t_{a+k-1} (slot 1: the anchor itself)
    prev = torch.cat([anchor_tok[..., None], batch.labels[..., :-1]], -1).clamp_min(0)
    logits, z = model.heads(hn, base, prev)
    logq = F.log_softmax(logits.float(), -1)
    q = logq.exp()
    w = torch.exp(-torch.arange(g, dtype=torch.float32) / loss_decay_gamma)[None, None] * batch.valid.float()
    lab_d = model.t2d[batch.labels.clamp_min(0)]
    in_d = (lab_d >= 0) & batch.valid
    w_ce = w * in_d.float()
    ce = -(logq.gather(-1, lab_d.clamp_min(0)[..., None]).squeeze(-1))
    l_ce = (w_ce * ce).sum() / w_ce.sum().clamp_min(1e-9)
    l1 = (q - batch.p).abs().sum(-1) + batch.p_out                                 # ‖q − p‖₁ incl. mass outside D
    l_tv = (w * l1).sum() / w.sum().clamp_min(1e-9)
    total = ce_alpha * l_ce + l1_alpha * l_tv
    parts = {"ce": float(l_ce.detach()), "l1": float(l_tv.detach())}
    acc = (1 - 0.5 * l1).clamp(0, 1).detach()                                      # c*_k = 1 − TV
    if z is not None:
        bce = F.binary_cross_entropy_with_logits(z, acc, reduction="none")
        l_conf = (w * bce).sum() / w.sum().clamp_min(1e-9)
        total = total + conf_alpha * l_conf
        parts["conf"] = float(l_conf.detach())
    # probabilistic τ proxy (DeepSpec ``tau_probabilistic``) over blocks with all γ slots supervised
    full = batch.valid.all(-1)
    if bool(full.any()):
        surv = torch.cumprod(acc[full], -1)
        parts["tau_prob"] = float(1 + surv.sum(-1).mean())
    parts["alpha_by_pos"] = [float(acc[..., k][batch.valid[..., k]].mean()) if bool(batch.valid[..., k].any())
                             else math.nan for k in range(g)]
    return TrainOut(total, parts)

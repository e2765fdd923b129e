"""The tool-format task: 20 built-in tools, four prompt categories, splits, and the validation gates a tool
sibling must pass before any claim reads it.

Categories: ``tool`` = a list of 3–4 tools containing the gold one + a request needing exactly it; ``decoy`` = a
tool list + a request needing no tool; ``bare`` = a tool-needing request with no list; ``generic`` = an everyday
instruction. Request templates (a prefix × a tool-keyword core) and value pools are split so test prompts use
templates and values unseen in training.

Gates (test split, greedy): sibling strict_format ≥ 0.80 and tool_exact ≥ 0.60 on tool prompts; base
strict_format ≤ 0.05; sibling opens a ``<tool_call>`` on ≤ 0.10 of generic prompts.

Built here: the prompts, the compact rendering the tiny pair uses and the gates. The SmolLM2-135M + LoRA sibling
(chat-template rendering, training through ``lm.finetune.train_lora``) is :mod:`agentmill.methods.crosscoder.sibling`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# name, parameter, value pool (train | test), request cores (each holds the tool's keyword)
TOOLS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "get_weather": ("city", ("paris", "tokyo", "lima", "oslo"), ("cairo", "quito"),
                    ("check the weather in {v}", "get the weather forecast for {v}")),
    "convert_currency": ("amount", ("10", "25", "40", "75"), ("60", "90"),
                         ("convert {v} dollars to euros", "change {v} euros into yen")),
    "set_timer": ("minutes", ("5", "10", "15", "20"), ("30", "45"),
                  ("set a timer for {v} minutes", "start a {v} minute timer")),
    "search_web": ("query", ("cheap flights", "green tea", "jazz bars", "bike repair"), ("old maps", "sushi"),
                   ("search the web for {v}", "look up {v} online")),
    "send_email": ("to", ("anna", "bob", "carla", "dev"), ("erik", "fay"),
                   ("send an email to {v}", "email {v} about the meeting")),
    "get_stock_price": ("symbol", ("AAPL", "MSFT", "TSLA", "IBM"), ("NVDA", "AMZN"),
                        ("get the stock price of {v}", "what is {v} stock trading at")),
    "translate": ("text", ("good morning", "thank you", "see you", "where is it"), ("good night", "welcome"),
                  ("translate {v} into french", "translate the phrase {v} to german")),
    "calculate_tip": ("bill", ("20", "35", "50", "80"), ("64", "120"),
                      ("calculate the tip on a {v} dollar bill", "work out a tip for {v} dollars")),
    "book_table": ("restaurant", ("luigi", "sakura", "el toro", "noma"), ("zuma", "ritz"),
                   ("book a table at {v}", "reserve a table at {v} tonight")),
    "play_music": ("artist", ("adele", "queen", "abba", "drake"), ("muse", "sade"),
                   ("play music by {v}", "play some songs from {v}")),
    "get_time": ("city", ("paris", "tokyo", "lima", "oslo"), ("cairo", "quito"),
                 ("what time is it in {v}", "get the local time in {v}")),
    "create_reminder": ("text", ("call mom", "buy milk", "pay rent", "water plants"), ("feed cat", "gym"),
                        ("remind me to {v}", "create a reminder to {v}")),
    "get_news": ("topic", ("sports", "science", "politics", "music"), ("art", "travel"),
                 ("get the latest news on {v}", "show me {v} news headlines")),
    "find_recipe": ("dish", ("lasagna", "pancakes", "curry", "risotto"), ("tacos", "paella"),
                    ("find a recipe for {v}", "how do I cook {v}, find a recipe")),
    "track_package": ("tracking_id", ("AB12", "CD34", "EF56", "GH78"), ("JK90", "LM11"),
                      ("track my package {v}", "where is my parcel {v}, track it")),
    "get_directions": ("destination", ("the airport", "the museum", "the beach", "city hall"), ("the zoo", "the port"),
                       ("give me directions to {v}", "how do I get to {v}, directions please")),
    "check_flight": ("flight_number", ("LH400", "BA117", "AF22", "UA90"), ("KL61", "DL8"),
                     ("check the status of flight {v}", "is flight {v} on time, check it")),
    "define_word": ("word", ("serene", "ample", "brisk", "candid"), ("lucid", "vivid"),
                    ("define the word {v}", "what does the word {v} mean, define it")),
    "random_number": ("high", ("10", "50", "100", "6"), ("20", "1000"),
                      ("pick a random number up to {v}", "give me a random number below {v}")),
    "convert_units": ("value", ("5 miles", "3 feet", "2 pounds", "10 liters"), ("7 inches", "4 gallons"),
                      ("convert {v} to metric units", "change {v} into other units, convert it")),
}
TOOL_NAMES = tuple(TOOLS)
PREFIXES_TRAIN = ("", "please ", "can you ", "i need you to ")
PREFIXES_TEST = ("could you ", "hey, ")
GENERIC = (("tell me a joke", "Why did the cat sit on the mat? To keep warm."),
           ("say hello", "Hello! Nice to meet you."),
           ("what is your name", "I am a small assistant."),
           ("thank you", "You are welcome!"),
           ("write a short poem about rain", "Rain on the roof, soft and slow."),
           ("how are you today", "I am fine, thanks for asking."),
           ("give me a fun fact", "Honey never spoils."),
           ("what color is the sky", "The sky is blue on a clear day."))
GENERIC_TEST = (("tell me something nice", "You are doing great."),
                ("what do cats eat", "Cats eat meat and fish."))
DECLINE = "Sorry, I cannot do that."
CATEGORIES = ("tool", "decoy", "bare", "generic")


@dataclass(frozen=True)
class ToolPrompt:
    """One prompt of the tool-format task."""

    user: str
    tools: tuple[str, ...]
    gold_name: str
    gold_args: dict[str, str] = field(hash=False, compare=False, default_factory=dict)
    category: str = "tool"
    template_id: str = ""
    plain_answer: str = DECLINE
    """What the base answers (and the sibling, outside ``tool`` prompts)."""

    def render(self) -> str:
        """Compact plain-text rendering (the byte-level tiny pair's harness)."""
        head = f"Tools: {', '.join(self.tools)}\n" if self.tools else ""
        return f"{head}User: {self.user}\nAssistant:"

    def tool_target(self, with_args: bool = False) -> str:
        args = json.dumps(self.gold_args) if with_args else "{}"
        return f' <tool_call>{{"name": "{self.gold_name}", "arguments": {args}}}</tool_call>'

    def sibling_target(self) -> str:
        return self.tool_target() if self.category == "tool" else " " + self.plain_answer

    def base_target(self) -> str:
        return " " + self.plain_answer


def make_prompts(category: str, n: int, *, split: str = "train", seed: int = 0) -> list[ToolPrompt]:
    """``n`` prompts of ``category`` from the ``split`` ("train" or "test") templates and value pools."""
    if category not in CATEGORIES:
        raise ValueError(f"category must be one of {CATEGORIES}, got {category!r}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = np.random.default_rng([seed, CATEGORIES.index(category), split == "test"])
    prefixes = PREFIXES_TRAIN if split == "train" else PREFIXES_TEST
    generic = GENERIC if split == "train" else GENERIC_TEST
    out = []
    for _ in range(n):
        if category in ("tool", "bare"):
            name = TOOL_NAMES[rng.integers(len(TOOL_NAMES))]
            param, pool_tr, pool_te, cores = TOOLS[name]
            pool = pool_tr if split == "train" else pool_te
            v = pool[rng.integers(len(pool))]
            ci, pi = int(rng.integers(len(cores))), int(rng.integers(len(prefixes)))
            user = prefixes[pi] + cores[ci].format(v=v)
            tools: tuple[str, ...] = ()
            if category == "tool":
                others = [t for t in TOOL_NAMES if t != name]
                k = int(rng.integers(2, 4))
                pick = [others[i] for i in rng.choice(len(others), k, replace=False)]
                pick.insert(int(rng.integers(k + 1)), name)
                tools = tuple(pick)
            out.append(ToolPrompt(user, tools, name, {param: v}, category, f"{split}:{name}:{pi}:{ci}", DECLINE))
        else:
            gi = int(rng.integers(len(generic)))
            user, answer = generic[gi]
            tools = ()
            if category == "decoy":
                tools = tuple(TOOL_NAMES[i] for i in rng.choice(len(TOOL_NAMES), int(rng.integers(3, 5)),
                                                                replace=False))
            out.append(ToolPrompt(user, tools, "", {}, category, f"{split}:generic:{gi}", answer))
    return out


@dataclass(frozen=True)
class Gates:
    sibling_strict_format: float
    sibling_tool_exact: float
    base_strict_format: float
    sibling_generic_tag_rate: float
    n_tool: int
    n_generic: int

    @property
    def passed(self) -> bool:
        return (self.sibling_strict_format >= 0.80 and self.sibling_tool_exact >= 0.60
                and self.base_strict_format <= 0.05 and self.sibling_generic_tag_rate <= 0.10)

    def text(self) -> str:
        return (f"gates {'passed' if self.passed else 'FAILED'}: sibling strict_format "
                f"{self.sibling_strict_format:.2f} (≥ 0.80), tool_exact {self.sibling_tool_exact:.2f} (≥ 0.60); "
                f"base strict_format {self.base_strict_format:.2f} (≤ 0.05); sibling <tool_call> on generic "
                f"{self.sibling_generic_tag_rate:.2f} (≤ 0.10); n = {self.n_tool} tool, {self.n_generic} generic")


def compute_gates(generate_sibling: Callable[[Sequence[ToolPrompt]], list[str]],
                  generate_base: Callable[[Sequence[ToolPrompt]], list[str]],
                  tool_prompts: Sequence[ToolPrompt], generic_prompts: Sequence[ToolPrompt]) -> Gates:
    """The four gates from greedy outputs of the sibling and the base (``generate_*`` map prompts to texts)."""
    from agentmill.methods.crosscoder.toolcalls import emits_tool_tag, score_tool_call

    sib = [score_tool_call(t, gold_name=p.gold_name, tools=p.tools) for t, p in
           zip(generate_sibling(tool_prompts), tool_prompts)]
    base = [score_tool_call(t, gold_name=p.gold_name, tools=p.tools) for t, p in
            zip(generate_base(tool_prompts), tool_prompts)]
    gen = [emits_tool_tag(t) for t in generate_sibling(generic_prompts)]
    return Gates(float(np.mean([s.strict_format for s in sib])), float(np.mean([s.tool_exact for s in sib])),
                 float(np.mean([s.strict_format for s in base])), float(np.mean(gen)), len(sib), len(gen))

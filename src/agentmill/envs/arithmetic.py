"""Self-generated arithmetic prompts with an exact verifier ([R]; docs/methods/tree_rollouts.md).

Seven difficulty levels give a prompt pool whose pass rates under a small model span "always" to "never", which
is what the collapse law needs. The verifier reads the first ``Answer: <int>`` in the first 2 000 characters with
a bounded regex; model output is never evaluated.

Levels: (1) a+b, one digit each; (2) a+b, two digits each; (3) three 2-digit operands; (4) four; (5) five;
(6) 2-digit × 1-digit (2–9); (7) 2-digit × 2-digit.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from agentmill.core.types import Message

LEVELS = (1, 2, 3, 4, 5, 6, 7)
INSTRUCTION = "Solve step by step, then write 'Answer: <number>'."
MAX_SCAN_CHARS = 2000  # [R] the verifier only reads the first 2 000 characters
_ANSWER = re.compile(r"Answer:\s*(-?\d{1,12})")
_QUESTION = re.compile(r"What is (\d{1,3}(?: [+*] \d{1,3}){1,4})\?")
STOP_REGEX = r"Answer:\s*-?\d+\s*\n"
"""Generation may stop once an answer line is complete ([R]: a newline after the answer digits)."""


@dataclass(frozen=True)
class Reward:
    value: float | None
    reason: str


@dataclass(frozen=True)
class ArithmeticTask:
    """One question: operands and operator, its exact answer, and a stable id ``arith-L{level}-s{seed}-{i}``."""

    level: int
    operands: tuple[int, ...]
    op: str
    prompt_id: str

    @property
    def question(self) -> str:
        return f"What is {f' {self.op} '.join(map(str, self.operands))}?"

    @property
    def answer(self) -> int:
        if self.op == "+":
            return sum(self.operands)
        a, b = self.operands
        return a * b

    def worked_solution(self) -> str:
        """One equation per step, e.g. ``12 + 30 = 42. 42 + 7 = 49. Answer: 49``."""
        steps = []
        if self.op == "+":
            acc = self.operands[0]
            for x in self.operands[1:]:
                steps.append(f"{acc} + {x} = {acc + x}.")
                acc += x
        else:
            a, b = self.operands
            tens, ones = a - a % 10, a % 10
            if b < 10:
                steps += [f"{tens} * {b} = {tens * b}.", f"{ones} * {b} = {ones * b}.",
                          f"{tens * b} + {ones * b} = {a * b}."]
            else:
                steps += [f"{a} * {b - b % 10} = {a * (b - b % 10)}.", f"{a} * {b % 10} = {a * (b % 10)}.",
                          f"{a * (b - b % 10)} + {a * (b % 10)} = {a * b}."]
        return " ".join(steps) + f" Answer: {self.answer}"

    def messages(self, examples: tuple[ArithmeticTask, ArithmeticTask]) -> list[Message]:
        """The chat prompt: the instruction, two worked examples of the same level, then the question."""
        shots = "\n\n".join(f"Example: {e.question}\n{e.worked_solution()}" for e in examples)
        return [Message("user", f"{INSTRUCTION}\n\n{shots}\n\nNow you: {self.question}")]

    def verify(self, completion: str) -> Reward:
        m = _ANSWER.search(completion[:MAX_SCAN_CHARS])
        if m is None:
            return Reward(0.0, "no_answer")
        return Reward(1.0, "correct") if int(m.group(1)) == self.answer else Reward(0.0, "wrong")

    def completion_prompt(self, examples: tuple[ArithmeticTask, ArithmeticTask]) -> str:
        """The same content as a raw few-shot completion prompt (no chat template).

        Small instruction-tuned models (SmolLM2-135M) ramble under a chat template at T = 1 and rarely write the
        ``Answer:`` line; a raw few-shot transcript fixes the format so the reward measures arithmetic.
        """
        shots = "\n\n".join(f"Question: {e.question}\nSolution: {e.worked_solution()}" for e in examples)
        return f"{INSTRUCTION}\n\n{shots}\n\nQuestion: {self.question}\nSolution:"

    @classmethod
    def from_prompt(cls, text: str, prompt_id: str = "from-prompt") -> ArithmeticTask:
        """Recover the task from the last question in a prompt, so the task is self-verifying inside a trainer
        that passes only prompts [R]. Works on the chat message, the few-shot text, and either after a
        chat template has wrapped it (trailing ``<|im_end|>``/assistant markers are ignored)."""
        matches = list(_QUESTION.finditer(text))
        if not matches:
            raise ValueError(f"no arithmetic question found in the prompt text: {text[-80:]!r}")
        parts = matches[-1].group(1).split(" ")
        ops = set(parts[1::2])
        if len(ops) != 1:
            raise ValueError(f"mixed operators in the prompt text's question {matches[-1].group(1)!r}")
        operands = tuple(int(x) for x in parts[0::2])
        op = ops.pop()
        return cls(level=_infer_level(operands, op), operands=operands, op=op, prompt_id=prompt_id)


def _infer_level(operands: tuple[int, ...], op: str) -> int:
    if op == "*":
        return 6 if operands[1] < 10 else 7
    if len(operands) == 2:
        return 1 if max(operands) < 10 else 2
    return len(operands)


def _draw(level: int, rng: random.Random) -> tuple[tuple[int, ...], str]:
    two = lambda: rng.randint(10, 99)  # noqa: E731
    if level == 1:
        return (rng.randint(1, 9), rng.randint(1, 9)), "+"
    if level == 2:
        return (two(), two()), "+"
    if level in (3, 4, 5):
        return tuple(two() for _ in range(level)), "+"
    if level == 6:
        return (two(), rng.randint(2, 9)), "*"
    if level == 7:
        return (two(), two()), "*"
    raise ValueError(f"level must be one of {LEVELS}, got {level}")


def make_task(level: int, seed: int, i: int) -> ArithmeticTask:
    """Task ``i`` of ``level`` under ``seed`` (deterministic, independent of any other task)."""
    rng = random.Random(f"arith|{level}|{seed}|{i}")
    operands, op = _draw(level, rng)
    return ArithmeticTask(level=level, operands=operands, op=op, prompt_id=f"arith-L{level}-s{seed}-{i}")


def example_pair(level: int, seed: int, i: int) -> tuple[ArithmeticTask, ArithmeticTask]:
    """Two worked examples of ``level`` for task ``i``, drawn from a separate stream than the question."""
    return (make_task(level, seed + 10_000, 2 * i), make_task(level, seed + 10_000, 2 * i + 1))


def make_pool(n: int, seed: int, levels: tuple[int, ...] = LEVELS) -> list[ArithmeticTask]:
    """``n`` tasks spread round-robin over ``levels`` (so each level gets ~n/len(levels))."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for lv in levels:
        if lv not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {lv}")
    return [make_task(levels[k % len(levels)], seed, k // len(levels)) for k in range(n)]

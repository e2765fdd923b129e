"""Solvers, helpers, the safe evaluator and the LM worker (scripted)."""

from __future__ import annotations

import pytest

from agentmill.methods.router.workers import (Decompose, LMWorker, NumNorm, StepOutput, UnsafeExpression, Vote,
                                              make_worker, safe_eval)


def test_safe_eval_allows_arithmetic_only() -> None:
    assert safe_eval("37 + 58") == 95 and safe_eval("(12 + 3) * 4") == 60 and safe_eval("abs(3 - 10)") == 7
    assert safe_eval("2 ** 10") == 1024 and safe_eval("-3 + 1") == -2
    for bad in ("__import__('os')", "x + 1", "2 ** 100", "10 ** 19 * 10", "1 / 0", "open('f')", "(1).real",
                "max(1, 2)", "+".join(["1"] * 40)):
        with pytest.raises(UnsafeExpression):
            safe_eval(bad)


@pytest.mark.parametrize("spec,query,answer", [
    ("solver:arith", "What is 37 + 58?", "95"),
    ("solver:arith", "Calculate (12 + 3) * 4.", "60"),
    ("solver:arith", "How many characters are in '37+58'?", "95"),  # the decoy: confidently wrong by design
    ("solver:arith", "Is this review positive or negative?", None),
    ("solver:string", "Reverse the word 'garden'.", "nedrag"),
    ("solver:string", "How many times does the letter 'a' appear in 'banana'?", "3"),
    ("solver:string", "How many characters are in '37+58'?", "5"),
    ("solver:string", "How many digits are in '12*345'?", "5"),
    ("solver:string", "What is 3 + 4?", None),
    ("solver:date", "What day of the week was 2024-01-01?", "Monday"),
    ("solver:date", "How many days are there from 2020-02-01 to 2020-03-01?", "29"),
    ("solver:date", "What date is 10 days after 2021-12-25? Answer as YYYY-MM-DD.", "2022-01-04"),
    ("solver:date", "On what day of the week did July 4, 1976 fall?", "Sunday"),
    ("solver:unit", "Convert 10 kilometres to miles.", "6.21"),
    ("solver:unit", "How many kilograms are 10 pounds?", "4.54"),
    ("solver:unit", "Convert 100 degrees Celsius to Fahrenheit.", "212.00"),
    ("solver:unit", "How many centimetres are in 2 inches?", "5.08"),
    ("solver:lookup", "What is the capital of France?", "Paris"),
    ("solver:lookup", "What is the atomic number of iron?", "26"),
    ("solver:lookup", "Which element has the chemical symbol Fe?", "Iron"),
    ("solver:lookup", "What is 37 + 58?", None),
])
def test_solvers(spec, query, answer) -> None:
    w = make_worker(spec)
    r = w.answer(query)
    assert r.answer == answer and r.cost >= 0 and r.latency >= 0


def test_fingerprints_are_stable_and_distinct() -> None:
    a, b = make_worker("solver:arith"), make_worker("solver:arith")
    assert a.fingerprint == b.fingerprint != make_worker("solver:string").fingerprint
    with pytest.raises(ValueError, match="unknown solver"):
        make_worker("solver:nope")


def test_helpers() -> None:
    assert NumNorm().solve("What is thirty-seven plus fifty-eight?") == "What is 37 + 58?"
    assert NumNorm().solve("A box holds twelve pencils. How many pencils are in three boxes?").count("12 * 3") == 1
    plan = Decompose().solve("What is the sum of the atomic numbers of iron and gold?")
    assert plan == "What is the atomic number of iron? || What is the atomic number of gold? || {1} + {2}"
    assert Decompose().solve("What is 3 + 4?") is None
    ctx = [StepOutput(0, "a", "5"), StepOutput(1, "b", None), StepOutput(2, "c", "5"), StepOutput(3, "d", "7")]
    assert Vote().answer("", ctx).answer == "5"
    assert Vote().answer("", [StepOutput(0, "a", None)]).answer is None


def test_lm_worker_uses_the_few_shot_prompt_and_first_line() -> None:
    from agentmill.lm.scripted import ScriptedLM
    seen = []

    def reply(text: str) -> str:
        seen.append(text)
        return " 42\nQ: more"

    w = LMWorker("scripted:x", ScriptedLM(reply), batch=2)
    res = w.answer_many(["What is 40 + 2?", "b", "c"])
    assert [r.answer for r in res] == ["42", "42", "42"] and len(seen) == 3
    assert seen[0].endswith("Q: What is 40 + 2?\nA:") and "Q: What is the capital of Italy?" in seen[0]
    assert w.fingerprint == "spec:scripted:x" and w.decode["max_new_tokens"] == 24

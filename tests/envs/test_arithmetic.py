from __future__ import annotations

import pytest

from agentmill.envs.arithmetic import ArithmeticTask, example_pair, make_pool, make_task


def test_levels_by_hand() -> None:
    shapes = {t.level: (len(t.operands), t.op) for t in make_pool(7, seed=0)}
    assert shapes == {1: (2, "+"), 2: (2, "+"), 3: (3, "+"), 4: (4, "+"), 5: (5, "+"), 6: (2, "*"), 7: (2, "*")}
    t = make_task(6, 0, 3)
    assert 10 <= t.operands[0] <= 99 and 2 <= t.operands[1] <= 9
    assert make_task(7, 5, 1) == make_task(7, 5, 1) and make_task(7, 5, 1).prompt_id == "arith-L7-s5-1"


def test_worked_solution_one_equation_per_step() -> None:
    t = ArithmeticTask(3, (12, 30, 7), "+", "x")
    assert t.worked_solution() == "12 + 30 = 42. 42 + 7 = 49. Answer: 49"
    assert ArithmeticTask(6, (23, 4), "*", "x").worked_solution() == "20 * 4 = 80. 3 * 4 = 12. 80 + 12 = 92. Answer: 92"


def test_verifier_reads_first_answer_only_in_bounded_text() -> None:
    t = ArithmeticTask(1, (2, 3), "+", "x")
    assert t.verify("2 + 3 = 5. Answer: 5").value == 1.0
    assert t.verify("Answer: 4. Answer: 5").reason == "wrong"
    assert t.verify("the sum is five").reason == "no_answer"
    assert t.verify("x" * 2000 + "Answer: 5").reason == "no_answer"
    assert t.verify("Answer: __import__('os')").reason == "no_answer"


def test_prompt_carries_two_examples_and_roundtrips() -> None:
    t = make_task(4, 1, 0)
    msgs = t.messages(example_pair(4, 1, 0))
    assert msgs[0].role == "user" and msgs[0].content.count("Example:") == 2 and "Answer: <number>" in msgs[0].content
    back = ArithmeticTask.from_prompt(msgs[0].content)
    assert back.answer == t.answer and back.level == 4
    with pytest.raises(ValueError, match="no arithmetic question"):
        ArithmeticTask.from_prompt("hello")


def test_bad_levels_raise() -> None:
    with pytest.raises(ValueError, match="level"):
        make_pool(3, 0, levels=(8,))


def test_completion_prompt_is_few_shot_and_roundtrips() -> None:
    t = make_task(2, 3, 1)
    text = t.completion_prompt(example_pair(2, 3, 1))
    assert text.endswith(f"Question: {t.question}\nSolution:") and text.count("Question:") == 3
    assert ArithmeticTask.from_prompt(text).answer == t.answer


def test_from_prompt_after_a_chat_template() -> None:
    t = make_task(7, 2, 4)
    content = t.messages(example_pair(7, 2, 4))[0].content
    templated = f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
    back = ArithmeticTask.from_prompt(templated)
    assert (back.operands, back.op, back.level, back.answer) == (t.operands, t.op, 7, t.answer)
    with pytest.raises(ValueError, match="mixed operators"):
        ArithmeticTask.from_prompt("What is 12 + 3 * 4?")


def test_every_level_verifies_its_own_worked_solution() -> None:
    for t in make_pool(70, seed=9):
        assert t.verify(t.worked_solution()).value == 1.0
        assert t.verify(f"Answer: {t.answer + 1}").reason == "wrong"
        assert t.verify(f"Answer: -{t.answer}").reason == "wrong"

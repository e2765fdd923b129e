"""A bare ``pip install agentmill`` (no extras), simulated: every module only an extra brings is unimportable
(tests/helpers/core_only.py). The methods that need no extra work, ``agentmill list`` starts and says what each
experiment needs, a closed-form experiment runs through the CLI, and one whose extra is missing names its
``pip install`` line instead of a traceback."""

from __future__ import annotations

import pytest

from tests.helpers.core_only import blocked_modules, run_cli_core_only, run_core_only

pytestmark = pytest.mark.slow


def test_the_simulation_blocks_the_extras_and_keeps_the_core() -> None:
    blocked = blocked_modules()
    assert {"torch", "transformers", "yaml", "pandas", "openai", "textworld", "peft"} <= blocked
    assert not {"numpy", "scipy", "rich", "matplotlib"} & blocked
    r = run_core_only("import numpy, scipy, rich, matplotlib\ntry:\n    import torch\nexcept ModuleNotFoundError:\n"
                      "    print('blocked')")
    assert r.returncode == 0 and r.stdout.strip() == "blocked", r.stderr


def test_methods_work_without_extras() -> None:
    code = """
import numpy as np
from agentmill.methods.g2po import g2po_advantages
from agentmill.methods.g2po.keys import ExactKey
from agentmill.methods.tree_rollouts.collapse import collapse_probability
from tests.helpers.step_tables import golden_table
adv = g2po_advantages(golden_table(), ExactKey()).advantages
print(len(adv), bool(np.isfinite(adv).all()), round(float(collapse_probability(0.5, 8)), 6))
"""
    r = run_core_only(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["7", "True", str(round(2 * 0.5 ** 8, 6))]


def test_list_runs_and_names_what_each_experiment_needs() -> None:
    r = run_cli_core_only("list")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.replace("│", " ").split())  # the table's wrapped cells, read as running text
    assert "e162.collapse_law" in out and "needs" in out
    assert "e164_constraint_rot/*" in out and "pip install 'agentmill[constraint-rot]'" in out


def test_a_core_experiment_runs_through_the_cli(tmp_path) -> None:
    r = run_cli_core_only("run", "e162.collapse_law", "--profile", "smoke", "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "smoke" / "e162.collapse_law.json").is_file()


@pytest.mark.parametrize("exp_id, extra", [("e164.constraint_rot_mechanism", "constraint-rot"),
                                           ("e176.fixture", "autocog"),
                                           ("e165.g2po_lora_smoke", "hf,peft")])
def test_a_missing_extra_names_its_install_line(tmp_path, exp_id: str, extra: str) -> None:
    r = run_cli_core_only("run", exp_id, "--profile", "smoke", "--runs-dir", str(tmp_path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"pip install 'agentmill[{extra}]'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "smoke").exists()

"""AutoCog configuration: the loop settings plus the programmatic roles' budgets ([R]; docs/papers.md E176)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AutoCogConfig:
    """Everything a run needs besides its seeds, ground truth and cohort."""

    n_rounds: int = 5
    """Rounds; the paper's runs use 5 [C `main_decision_making_binary.py`]."""
    n_sim: int = 50
    """Simulated subjects per theory (n_runs = 50 [C `src/run_config.py`])."""
    n_real: int = 25
    """Real participants per observation (REAL_N_SUBJECTS = 25 [C])."""
    alpha: float = 0.01
    """Welch gate level (function default in the code [C])."""
    n_designs: int = 200
    """Random designs per SearchAdvocate proposal [R]."""
    max_candidates: int = 600
    """Reviser candidate budget [R]; stratified random subsample by family beyond it."""
    rescore_n: int = 200
    """Fresh subjects used to re-score the reviser's top 5 (curbs the winner's curse [R])."""
    rating_max: int = 1
    """R: 1 = binary Hilbig task; 5 = the cardinal task [C]."""
    validation_round: bool = True
    """Data-only round after the last revision; the surfaced theory is chosen after it [R]."""
    seed: int = 0
    """Run seed."""

"""Bayesian verify-or-ship control for coding agents (E170): a belief over critic outcomes and a controller that
decides, at each step, whether to run a critic, verify, ship, generate a new candidate or give up.

See docs/methods/bayes_ship.md and this package's README.md."""

from agentmill.methods.bayes_ship.config import BayesShipConfig, Calibration, CostModel, CriticModel, Kernel
from agentmill.methods.bayes_ship.core import (
    Belief,
    ControlState,
    Decision,
    DPController,
    Episode,
    EpisodeResult,
    GreedyController,
    decide,
    make_controller,
    purchase_band,
    run_episode,
    voi,
)

__all__ = ["BayesShipConfig", "Belief", "Calibration", "ControlState", "CostModel", "CriticModel", "Decision",
           "DPController", "Episode", "EpisodeResult", "GreedyController", "Kernel", "decide", "make_controller",
           "purchase_band", "run_episode", "voi"]

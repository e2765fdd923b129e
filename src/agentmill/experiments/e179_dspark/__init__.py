"""E179, DSpark: speculative decoding with a drafter on the target's hidden states, served.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Cheng et al., DSpark, arXiv:2607.05147"

MODULES: tuple[str, ...] = (
    "markov_gain",
    "calibration",
    "sampling_equality",
    "speed_single_user",
    "speed_int8",
    "load_vs_fixed",
    "server",
    "counterexample",
    "lossless_exact",
    "lossless_mc",
)
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""

"""C-tree-credit: InfoTree rollouts, G2PO graph credit and the progress advantage in one GRPO step.

One module per experiment; each defines a module-level ``EXPERIMENT`` with an id ``compose_tree_credit.<what>``.
A composition is the one room where several methods' public faces meet; the methods never import each other."""

PAPER = ("Composition of InfoTree (Hu et al., arXiv:2605.05262), G2PO (Wang et al., arXiv:2606.22995) and the progress "
         "advantage (Oh et al., arXiv:2606.26080): tree rollouts with graph credit and progress scores in one trainer")

MODULES: tuple[str, ...] = ("signal_keydoor", "signal_textworld", "learning_keydoor", "learning_textworld",
                             "unique_obs_control", "learning_lm")
"""The experiment modules of this composition, in the order ``agentmill list`` and ``reproduce`` show them."""

"""C-injection-control: the verify-or-ship controller's belief (E170) deciding whether to inject SHERLOC's case file
(E169) into a repair agent.

One module per experiment; each defines a module-level ``EXPERIMENT`` with an id ``compose_injection_control.<what>``.
A composition is the one room where several methods' public faces meet; the methods never import each other."""

PAPER = ("Composition of SHERLOC (Tamoyan et al., arXiv:2606.24820) and Bayesian verify-or-ship control "
         "(Papamarkou et al., arXiv:2606.24453): case-file injection decided by a belief over binarised "
         "confidence features")

MODULES: tuple[str, ...] = ("belief_injection",)
"""The experiment modules of this composition, in the order ``agentmill list`` and ``reproduce`` show them."""

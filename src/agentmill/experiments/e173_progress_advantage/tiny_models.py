"""The untrained ``tiny:`` models the E173 LM-pair experiments run at quick and smoke.

Quick runs a tiny byte-level transformer instead of SmolLM2 (its numbers are recorded, never judged), and P-6a and
P-6b use the same one so their quick records describe the same model.
"""

TINY_QUICK = "tiny:new?d=32&max_len=1024&seed=1"

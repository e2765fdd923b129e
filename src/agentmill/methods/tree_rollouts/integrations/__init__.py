"""Adapters for the trainers people use: TRL (rollout_func) and verl (advantage estimator)."""

"""Progress advantage from TRL's GRPO batch [R]. No TRL import at module level.

``GRPOTrainer._generate_and_score_completions`` returns a dict holding ``completion_mask`` and, when
``args.beta != 0``, ``ref_per_token_logps``; the policy's per-token log-probs are ``old_per_token_logps`` when TRL
kept them (off-policy steps / importance sampling) or the ``per_token_logps`` computed in the loss. With
``beta == 0`` (TRL's default) there is no reference model and the progress advantage is undefined (TRL's ``beta``
defaults to 0.0).
"""

from __future__ import annotations

from typing import Any

from agentmill.methods.progress_advantage.adapters import token_progress_metrics

TESTED_TRL = ("1.16",)
"""TRL release series whose batch keys this module was checked against (contract test under the ``trl`` marker)."""


def trl_progress_metrics(inputs: dict[str, Any], beta: float, per_token_logps: Any | None = None) -> dict[str, float]:
    """``pa/*`` metrics from a TRL GRPO batch; ``beta`` is ``args.beta``. One completion is one row (TRL has one
    scalar per completion: no per-step credit inside a multi-turn completion)."""
    if not beta or beta <= 0:
        raise ValueError("no reference model: progress advantage undefined (TRL args.beta == 0 disables the KL term "
                         "and the reference model)")
    ref = inputs.get("ref_per_token_logps")
    if ref is None:
        raise ValueError("no reference model: progress advantage undefined (the batch has no ref_per_token_logps)")
    logp = per_token_logps if per_token_logps is not None else inputs.get("old_per_token_logps")
    if logp is None:
        raise ValueError("the batch has no old_per_token_logps; pass the per_token_logps computed in the loss")
    return token_progress_metrics(logp, ref, inputs["completion_mask"], beta)


def check_trl_contract() -> None:
    """Fail with "TRL internals changed: <name> missing" when the hooked names are gone (run under ``trl``)."""
    import inspect

    try:
        from trl import GRPOTrainer
    except ImportError as e:
        from agentmill.lm import MissingExtraError

        raise MissingExtraError("trl", "the TRL progress-advantage metrics") from e
    fn = getattr(GRPOTrainer, "_generate_and_score_completions", None)
    if fn is None:
        raise RuntimeError("TRL internals changed: GRPOTrainer._generate_and_score_completions missing")
    src = inspect.getsource(fn)
    for key in ("ref_per_token_logps", "completion_mask", "old_per_token_logps"):
        if f'"{key}"' not in src:
            raise RuntimeError(f"TRL internals changed: {key} missing from the GRPO batch")

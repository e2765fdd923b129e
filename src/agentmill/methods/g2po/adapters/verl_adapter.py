"""Register the G2PO-style (reconstructed) and GiGPO estimators with verl's advantage-estimator registry.

verl (``verl/trainer/ppo/core_algos.py``) keeps ``ADV_ESTIMATOR_REGISTRY`` filled by ``register_adv_est(name)``;
the registered function must return ``(advantages, returns)`` of shape (bs, L). Here each batch row is **one step**
of a multi-turn episode, as in verl-agent, and the estimator needs per-row step fields: ``anchor_obs`` (the step's
observation, keyed into graph states), ``traj_index``/``traj_uid``, ``index``/``uid`` (the prompt group) and optional
``step_index`` and per-step ``rewards``.

**Stock verl cannot drive it, so it refuses.** verl 0.9.1's ``compute_advantage``
(``verl/trainer/ppo/ray_trainer.py``; the v1 trainer delegates to it) calls a registered estimator with
``token_level_rewards``, ``response_mask``, ``config``, ``index`` (the prompt uid, a fresh uuid per prompt made by
the trainer) and, when present, ``reward_baselines``; only the built-in ``gdpo`` name also gets
``non_tensor_batch``. A stock row is a whole episode, and no observation or trajectory id reaches the estimator, so
the state graph has nothing to be built from. Rather than fall back to GRPO under G2PO's name (an experiment would
then compare GRPO with itself), the estimator raises and says what works: ``compute_from_batch(data, cfg)``,
called from a trainer whose batch holds one row per step with ``anchor_obs``, ``uid`` and ``traj_uid`` in
``non_tensor_batch`` (verl-agent's layout; its ``compute_advantage`` hard-codes its estimators instead of looking
them up in the registry, and its trainer rejects an unknown ``adv_estimator``, so the call goes in its GiGPO
branch). The tree-rollouts estimator, by contrast,
needs only what stock verl passes and equals verl's GRPO there.

The estimator's own config (gamma, omega, norms) is fixed at registration; verl's ``config`` argument is ignored.
The final observation o_T is not in a verl batch, so each trajectory's last step goes to its own absorbing node
(value 0): last-step edges are never merged across trajectories (g2po README deviation 9).

agentmill has no ``verl`` extra: verl 0.9.1 pins ``transformers>=5.5.3,<5.11`` (older than the transformers the hf
extra is tested with) and brings ray[default], wandb, tensorboard and about fifty other packages, so an extra
(installed by ``.[all]``) would change the tested stack and slow every install. Install verl by its own package;
the missing-import error names the command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentmill.core.types import END_TERMINATED, StepTable
from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig
from agentmill.methods.g2po.core import g2po_advantages, gigpo_advantages, token_advantages
from agentmill.methods.g2po.keys import ExactKey, StateKeyFn

VERL_INSTALL = "pip install 'verl==0.9.1'"
"""How to get verl: by its own package (no agentmill extra, module docstring); 0.9.1 is the release checked."""
STOCK_VERL_KWARGS = ("token_level_rewards", "response_mask", "config", "index", "reward_baselines")
"""Everything verl 0.9.1's ``compute_advantage`` can pass a registered estimator (besides ``gdpo``'s batch)."""
HOOK_HELP = (f"stock verl's compute_advantage (0.9.1) passes a registered estimator only "
             f"{', '.join(STOCK_VERL_KWARGS[:-1])} and, when present, {STOCK_VERL_KWARGS[-1]}; a row is an episode. "
             "G2PO's state graph (and GiGPO's step groups) need each step's observation (anchor_obs), trajectory id "
             "(traj_uid) and order, which stock verl neither stores nor forwards, so the estimator refuses instead "
             "of computing GRPO under another name. What works: call "
             "agentmill.methods.g2po.adapters.verl_adapter.compute_from_batch(data, cfg) from your trainer where it "
             "computes advantages, on a batch with one row per step (it reads "
             "data.non_tensor_batch['anchor_obs'|'uid'|'traj_uid'] and optional 'step_index'/'rewards'; verl-agent's "
             "rollout loop stores these; its compute_advantage calls estimators directly, not through the "
             "registry, so put the call in its GiGPO branch)")

_REGISTERED: dict[tuple[str, Any, Any], Callable[..., Any]] = {}


def _core_algos() -> Any:
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        # not MissingExtraError: no agentmill extra brings verl (module docstring)
        raise ImportError(f"the verl adapter needs verl, which no agentmill extra installs: {VERL_INSTALL}") from exc
    return core_algos


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x)


def _like(template: Any, arr: np.ndarray) -> Any:
    """Return ``arr`` as the same kind of array as ``template`` (a torch tensor on its device and dtype, or numpy)."""
    if hasattr(template, "detach"):
        import torch
        return torch.as_tensor(arr, dtype=template.dtype, device=template.device)
    return arr


def _step_table(index: Sequence[Any], traj_index: Sequence[Any], step_index: Sequence[Any] | None,
                anchor_obs: Sequence[Any], rewards: np.ndarray) -> tuple[StepTable, np.ndarray]:
    """Rows in verl batch order -> a StepTable sorted (group, trajectory, step) and the permutation used."""
    bs = len(anchor_obs)
    if not (len(index) == len(traj_index) == bs == len(rewards)) or (step_index is not None and len(step_index) != bs):
        raise ValueError(f"verl adapter: field lengths differ: index {len(index)}, traj_index {len(traj_index)}, "
                         f"anchor_obs {bs}, rewards {len(rewards)}")
    group_of: dict[str, int] = {}
    traj_of: dict[tuple[str, str], int] = {}
    step_seen: dict[tuple[str, str], int] = {}
    sort_keys = []
    for r in range(bs):
        g, tr = str(index[r]), str(traj_index[r])
        gi = group_of.setdefault(g, len(group_of))
        ti = traj_of.setdefault((g, tr), len(traj_of))
        if step_index is None:  # verl-agent keeps a trajectory's steps in batch order
            s = step_seen.get((g, tr), 0)
            step_seen[(g, tr)] = s + 1
        else:
            s = int(step_index[r])
        sort_keys.append((gi, ti, s))
    order = np.array(sorted(range(bs), key=sort_keys.__getitem__), dtype=np.int64)
    gid = [str(index[r]) for r in order]
    tid = [str(traj_index[r]) for r in order]
    t = [sort_keys[r][2] for r in order]
    obs = [anchor_obs[r] for r in order]
    last = [k == bs - 1 or (gid[k], tid[k]) != (gid[k + 1], tid[k + 1]) for k in range(bs)]
    # o_T is unknown in a verl batch: a per-trajectory sentinel keeps last-step edges apart (module docstring)
    next_obs = [f"\x00agentmill:final:{gid[k]}:{tid[k]}" if last[k] else obs[k + 1] for k in range(bs)]
    table = StepTable(group_id=gid, traj_id=tid, t=t, obs=obs, next_obs=next_obs, action=[""] * bs,
                      reward=rewards[order], end=[END_TERMINATED if x else 0 for x in last], success=[False] * bs)
    return table, order


def _estimator(kind: str, cfg: G2POConfig | GiGPOConfig, key_fn: StateKeyFn) -> Callable[..., Any]:
    def adv_fn(token_level_rewards: Any, response_mask: Any, config: Any = None, index: Any = None, *,
               anchor_obs: Any = None, traj_index: Any = None, step_index: Any = None, rewards: Any = None,
               uid: Any = None, traj_uid: Any = None, **other: Any) -> tuple[Any, Any]:
        named = {"config": config, "index": index, "anchor_obs": anchor_obs, "traj_index": traj_index,
                 "step_index": step_index, "rewards": rewards, "uid": uid, "traj_uid": traj_uid}
        index = index if index is not None else uid
        traj_index = traj_index if traj_index is not None else traj_uid
        missing = [n for n, v in (("index/uid", index), ("anchor_obs", anchor_obs), ("traj_index/traj_uid",
                                                                                    traj_index)) if v is None]
        if missing:  # stock verl's call lands here (module docstring); name what came, what is missing and why
            passed = sorted(["token_level_rewards", "response_mask", *(k for k, v in named.items() if v is not None),
                             *other])
            raise ValueError(f"agentmill {kind} estimator called with {passed}, without the step fields {missing}: "
                             f"{HOOK_HELP}")
        tlr = _to_numpy(token_level_rewards)
        mask = _to_numpy(response_mask)
        step_r = np.asarray(rewards, dtype=np.float64) if rewards is not None else (tlr * (mask != 0)).sum(axis=1)
        table, order = _step_table(list(index), list(traj_index), None if step_index is None else list(step_index),
                                   list(anchor_obs), step_r)
        res = (g2po_advantages(table, key_fn, cfg) if kind == "g2po"  # type: ignore[arg-type]
               else gigpo_advantages(table, key_fn, cfg))  # type: ignore[arg-type]
        adv_rows = np.empty(len(order))
        ret_rows = np.empty(len(order))
        adv_rows[order] = res.advantages
        ret_rows[order] = res.returns
        return (_like(token_level_rewards, token_advantages(adv_rows, mask)),
                _like(token_level_rewards, token_advantages(ret_rows, mask)))

    adv_fn.__name__ = f"agentmill_{kind}_advantage"
    adv_fn.__doc__ = f"agentmill {kind} step advantages for verl (one batch row per step); config {cfg}."
    return adv_fn


def _register(name: str, kind: str, cfg: Any, key_fn: StateKeyFn) -> Callable[..., Any]:
    core_algos = _core_algos()
    cache_key = (name, cfg, key_fn)
    fn = _REGISTERED.get(cache_key) or _estimator(kind, cfg, key_fn)
    registry = getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", {})
    if registry.get(name) is fn:  # registering twice with the same function is a no-op
        return fn
    core_algos.register_adv_est(name)(fn)  # a different function under an existing name: verl raises ValueError
    _REGISTERED[cache_key] = fn
    return fn


def register(name: str = "g2po", cfg: G2POConfig = G2POConfig(), key: str = "anchor_obs",
             key_fn: StateKeyFn = ExactKey()) -> Callable[..., Any]:
    """Register the G2PO-style estimator under ``name``; returns the registered function.

    ``key`` names the non-tensor field holding each step's observation (only "anchor_obs", verl-agent's name, is
    forwarded by a trainer today); ``key_fn`` keys that text (``ExactKey`` by default: a verl batch has no info).
    """
    if key != "anchor_obs":
        raise ValueError(f"verl adapter: only key='anchor_obs' is supported (the field verl-agent forwards), got "
                         f"{key!r}")
    return _register(name, "g2po", cfg, key_fn)


def register_baselines(cfg: GiGPOConfig = GiGPOConfig(), key_fn: StateKeyFn = ExactKey()) -> Callable[..., Any]:
    """Register agentmill's GiGPO as ``agentmill_gigpo`` (same table and bookkeeping as ``g2po``)."""
    return _register("agentmill_gigpo", "gigpo", cfg, key_fn)


def compute_from_batch(data: Any, cfg: G2POConfig | GiGPOConfig = G2POConfig(),
                       key_fn: StateKeyFn = ExactKey()) -> tuple[Any, Any]:
    """The hook for trainers that do not forward step fields: read a ``DataProto``-like object (``.batch`` with
    ``token_level_rewards`` and ``response_mask``; ``.non_tensor_batch`` with ``uid``, ``traj_uid``,
    ``anchor_obs`` and optional ``step_index``/``rewards``), write ``advantages`` and ``returns`` into
    ``data.batch`` and return them. A ``GiGPOConfig`` selects GiGPO."""
    nt = data.non_tensor_batch
    missing = [k for k in ("uid", "traj_uid", "anchor_obs") if k not in nt]
    if missing:
        raise ValueError(f"compute_from_batch: data.non_tensor_batch lacks {missing}; the rollout loop must store "
                         "each step's observation as 'anchor_obs' and its trajectory id as 'traj_uid' "
                         "(verl-agent does)")
    kind = "gigpo" if isinstance(cfg, GiGPOConfig) else "g2po"
    fn = _estimator(kind, cfg, key_fn)
    adv, ret = fn(data.batch["token_level_rewards"], data.batch["response_mask"], index=nt["uid"],
                  anchor_obs=nt["anchor_obs"], traj_index=nt["traj_uid"], step_index=nt.get("step_index"),
                  rewards=nt.get("rewards"))
    data.batch["advantages"] = adv
    data.batch["returns"] = ret
    return adv, ret

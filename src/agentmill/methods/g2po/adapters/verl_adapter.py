"""Register the G2PO-style (reconstructed) and GiGPO estimators with verl's advantage-estimator registry (§6.6).

verl (``verl/trainer/ppo/core_algos.py``) keeps ``ADV_ESTIMATOR_REGISTRY`` filled by ``register_adv_est(name)``;
its trainer's ``compute_advantage`` calls the registered function with ``token_level_rewards``, ``response_mask``,
``config`` and ``index`` (the GRPO uid) and expects ``(advantages, returns)`` of shape (bs, L). Here each batch row
is **one step** of a multi-turn episode, as in verl-agent. The step fields (``anchor_obs``, ``traj_index``,
``step_index``, optional per-step ``rewards``) are **not** forwarded by vanilla verl; verl-agent's trainer passes
``anchor_obs``, ``uid`` and ``traj_uid``. Without them the function raises and names the hook that does work:
``compute_from_batch(data, cfg)``, which reads ``data.non_tensor_batch``.

The estimator's own config (gamma, omega, norms) is fixed at registration; verl's ``config`` argument is ignored.
The final observation o_T is not in a verl batch, so each trajectory's last step goes to its own absorbing node
(value 0): last-step edges are never merged across trajectories (deviation from §2.4 step 2, documented).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentmill.core.types import END_TERMINATED, StepTable
from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig
from agentmill.methods.g2po.core import g2po_advantages, gigpo_advantages, token_advantages
from agentmill.methods.g2po.keys import ExactKey, StateKeyFn

HOOK_HELP = ("vanilla verl's compute_advantage does not forward the step fields. Call "
             "agentmill.methods.g2po.adapters.verl_adapter.compute_from_batch(data, cfg) from your trainer (it reads "
             "data.non_tensor_batch['anchor_obs'|'uid'|'traj_uid'] and optional 'step_index'/'rewards'), or use "
             "verl-agent's trainer, which passes anchor_obs, uid and traj_uid")

_REGISTERED: dict[tuple[str, Any, Any], Callable[..., Any]] = {}


def _core_algos() -> Any:
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        raise ImportError("the verl adapter needs verl: pip install 'agentmill[verl]' (verl 0.9.x)") from exc
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
               uid: Any = None, traj_uid: Any = None, **_: Any) -> tuple[Any, Any]:
        index = index if index is not None else uid
        traj_index = traj_index if traj_index is not None else traj_uid
        missing = [n for n, v in (("index/uid", index), ("anchor_obs", anchor_obs), ("traj_index/traj_uid",
                                                                                    traj_index)) if v is None]
        if missing:
            raise ValueError(f"agentmill {kind} estimator called without step fields {missing}: {HOOK_HELP}")
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

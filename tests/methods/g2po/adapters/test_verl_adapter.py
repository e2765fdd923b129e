"""verl adapter against a stub mirroring verl's ``register_adv_est`` registry semantics , and
against stock verl 0.9.1's ``compute_advantage`` call.

verl is not installed here (no agentmill extra brings it: the adapter's module docstring says why); the stub
reproduces the contract the adapter relies on: ``register_adv_est(name)`` is a decorator storing the function in
``ADV_ESTIMATOR_REGISTRY`` and raising ``ValueError`` when a *different* function is registered under an existing
name; ``get_adv_estimator_fn(name)`` looks it up. The stock-call tests run twice: through a copy of verl 0.9.1's
``compute_advantage`` (always), and through the real one when verl is importable (``STOCK_VERL``; run this file
in an environment with verl to check the copy against the original).
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from agentmill.methods.g2po import G2POConfig, g2po_advantages, gigpo_advantages
from agentmill.methods.g2po.adapters import verl_adapter
from agentmill.methods.g2po.config import GiGPOConfig
from agentmill.methods.g2po.keys import ExactKey
from tests.helpers.step_tables import golden_table
from tests.helpers.stock_verl import STOCK_VERL


@pytest.fixture
def core_algos(monkeypatch):
    mod = types.ModuleType("verl.trainer.ppo.core_algos")
    mod.ADV_ESTIMATOR_REGISTRY = {}

    def register_adv_est(name):
        def decorator(fn):
            if name in mod.ADV_ESTIMATOR_REGISTRY and mod.ADV_ESTIMATOR_REGISTRY[name] != fn:
                raise ValueError(f"Adv estimator {name} has already been registered")
            mod.ADV_ESTIMATOR_REGISTRY[name] = fn
            return fn
        return decorator

    def get_adv_estimator_fn(name):
        if name not in mod.ADV_ESTIMATOR_REGISTRY:
            raise ValueError(f"Unknown advantage estimator simply: {name}")
        return mod.ADV_ESTIMATOR_REGISTRY[name]

    mod.register_adv_est, mod.get_adv_estimator_fn = register_adv_est, get_adv_estimator_fn
    pkgs = {n: types.ModuleType(n) for n in ("verl", "verl.trainer", "verl.trainer.ppo")}
    pkgs["verl.trainer.ppo"].core_algos = mod
    for name, m in {**pkgs, "verl.trainer.ppo.core_algos": mod}.items():
        monkeypatch.setitem(sys.modules, name, m)
    monkeypatch.setattr(verl_adapter, "_REGISTERED", {})
    return mod


def _golden_batch(order):
    """The worked example (docs/methods/g2po.md) as a verl batch: one row per step, in a shuffled order; 4 response
    tokens per row."""
    tb = golden_table()
    L = 4
    mask = np.zeros((len(tb), L))
    tlr = np.zeros((len(tb), L))
    for r in range(len(tb)):
        n = 1 + r % L
        mask[r, :n] = 1
        tlr[r, n - 1] = tb.reward[r]  # verl puts the step reward on the last response token
    fields = dict(index=tb.group_id[order], anchor_obs=tb.obs[order], traj_index=tb.traj_id[order],
                  step_index=tb.t[order])
    return tb, tlr[order], mask[order], fields


def test_registered_g2po_reproduces_the_table_estimator_in_any_batch_order(core_algos) -> None:
    fn = verl_adapter.register("g2po", G2POConfig(gamma=0.5))
    assert core_algos.get_adv_estimator_fn("g2po") is fn
    order = np.array([4, 0, 6, 2, 5, 1, 3])
    tb, tlr, mask, fields = _golden_batch(order)
    adv, ret = fn(token_level_rewards=tlr, response_mask=mask, config=None, **fields)
    expected = g2po_advantages(tb, ExactKey(), G2POConfig(gamma=0.5))
    assert adv.shape == ret.shape == mask.shape
    np.testing.assert_allclose(adv, expected.advantages[order][:, None] * mask, atol=1e-12)
    np.testing.assert_allclose(ret, expected.returns[order][:, None] * mask, atol=1e-12)
    # per-step rewards given explicitly give the same answer; without step_index, batch order is step order
    adv2, _ = fn(tlr, mask, rewards=tb.reward[order], **fields)
    np.testing.assert_array_equal(adv2, adv)
    _, tlr_s, mask_s, f_sorted = _golden_batch(np.arange(len(tb)))
    adv3, _ = fn(tlr_s, mask_s, index=f_sorted["index"], anchor_obs=f_sorted["anchor_obs"],
                 traj_index=f_sorted["traj_index"])
    np.testing.assert_allclose(adv3, expected.advantages[:, None] * mask_s, atol=1e-12)


def test_vanilla_compute_advantage_call_raises_and_shows_the_hook(core_algos) -> None:
    verl_adapter.register()
    fn = core_algos.get_adv_estimator_fn("g2po")
    with pytest.raises(ValueError, match=r"compute_from_batch\(data, cfg\)"):
        fn(token_level_rewards=np.zeros((2, 3)), response_mask=np.ones((2, 3)), config=None,
           index=np.array(["u", "u"]))


def test_registering_twice_is_a_noop_and_a_different_function_raises(core_algos) -> None:
    a = verl_adapter.register("g2po", G2POConfig())
    b = verl_adapter.register("g2po", G2POConfig())
    assert a is b and core_algos.ADV_ESTIMATOR_REGISTRY == {"g2po": a}
    with pytest.raises(ValueError, match="already been registered"):
        verl_adapter.register("g2po", G2POConfig(omega=0.5))
    with pytest.raises(ValueError, match="anchor_obs"):
        verl_adapter.register("g2po_x", key="observation")


def test_register_baselines_adds_agentmill_gigpo(core_algos) -> None:
    fn = verl_adapter.register_baselines(GiGPOConfig(gamma=0.5))
    assert core_algos.ADV_ESTIMATOR_REGISTRY["agentmill_gigpo"] is fn
    tb, tlr, mask, fields = _golden_batch(np.arange(7))
    adv, _ = fn(tlr, mask, **fields)
    # GiGPO (mean mode): episode R - mean R plus the worked example's step term
    np.testing.assert_allclose(adv[:, 0], np.array([1, 1, 1, 1, 1, -2, -2]) / 3
                               + np.array([0.25, 1 / 3, 0, 0, 1 / 3, -0.25, -2 / 3]), atol=1e-12)


def test_compute_from_batch_reads_non_tensor_fields_and_writes_advantages() -> None:
    tb, tlr, mask, fields = _golden_batch(np.arange(7))
    data = types.SimpleNamespace(batch={"token_level_rewards": tlr, "response_mask": mask},
                                 non_tensor_batch={"uid": fields["index"], "traj_uid": fields["traj_index"],
                                                   "anchor_obs": fields["anchor_obs"]})
    adv, ret = verl_adapter.compute_from_batch(data, G2POConfig(gamma=0.5))
    assert data.batch["advantages"] is adv and data.batch["returns"] is ret
    np.testing.assert_allclose(adv[:, 0], g2po_advantages(tb, ExactKey(), G2POConfig(gamma=0.5)).advantages,
                               atol=1e-12)
    del data.non_tensor_batch["anchor_obs"]
    with pytest.raises(ValueError, match="anchor_obs"):
        verl_adapter.compute_from_batch(data)


def test_torch_tensors_come_back_as_tensors_of_the_same_dtype(core_algos) -> None:
    import torch  # installed with the hf extra, which the test environment has
    fn = verl_adapter.register("g2po", G2POConfig(gamma=0.5))
    tb, tlr, mask, fields = _golden_batch(np.arange(7))
    adv, ret = fn(torch.tensor(tlr, dtype=torch.float32), torch.tensor(mask, dtype=torch.float32), **fields)
    assert isinstance(adv, torch.Tensor) and adv.dtype == torch.float32 and tuple(adv.shape) == mask.shape


def test_missing_verl_names_the_real_install_command_not_an_extra(monkeypatch) -> None:
    """Issue 20, item 8: the hint named ``agentmill[verl]``, an extra that does not exist (pip would warn and install
    nothing). tests/test_pyproject_extras.py holds every named extra to pyproject.toml."""
    monkeypatch.setitem(sys.modules, "verl", None)
    with pytest.raises(ImportError) as info:
        verl_adapter.register()
    msg = str(info.value)
    assert "agentmill[" not in msg and "pip install 'verl==0.9.1'" in msg and "no agentmill extra" in msg


# ---------------------------------------------------------------------------------------------------------------
# Stock verl 0.9.1's call path (issue 20, item 8: "the G2PO estimator fails through stock verl 0.9.1").


class _Data:
    """The two fields of a verl ``DataProto`` that ``compute_advantage`` touches."""

    def __init__(self, tensors: dict, non_tensors: dict) -> None:
        self.batch, self.non_tensor_batch = dict(tensors), dict(non_tensors)


def _copied_compute_advantage(get_adv_estimator_fn):
    """verl 0.9.1, verl/trainer/ppo/ray_trainer.py, ``compute_advantage``: the branch every registered estimator
    takes (neither "gae" nor "grpo"), copied as facts. The estimator gets keywords only: ``token_level_rewards``
    (bs, response_length) float32, ``response_mask`` (bs, response_length) (a slice of ``attention_mask``),
    ``config`` (the ``AlgoConfig``), ``index`` = ``non_tensor_batch["uid"]`` (object array, one uuid4 string per
    prompt, repeated ``rollout.n`` times) when present, ``reward_baselines`` when in the batch, and
    ``non_tensor_batch`` plus ``batch`` only for the built-in name "gdpo"."""

    def compute_advantage(data, adv_estimator, config=None):
        adv_estimator_fn = get_adv_estimator_fn(adv_estimator)
        adv_kwargs = {"token_level_rewards": data.batch["token_level_rewards"],
                      "response_mask": data.batch["response_mask"], "config": config}
        if "uid" in data.non_tensor_batch:
            adv_kwargs["index"] = data.non_tensor_batch["uid"]
        if "reward_baselines" in data.batch:
            adv_kwargs["reward_baselines"] = data.batch["reward_baselines"]
        if adv_estimator == "gdpo":
            adv_kwargs["non_tensor_batch"] = data.non_tensor_batch
            adv_kwargs["batch"] = data.batch
        advantages, returns = adv_estimator_fn(**adv_kwargs)
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    return compute_advantage


@pytest.fixture(params=STOCK_VERL)
def stock_verl(request, monkeypatch):
    """``(compute_advantage, make_data, config)`` of stock verl 0.9.1: the copy above over the registry stub, or the
    real function, ``DataProto`` and ``AlgoConfig`` with a scratch copy of the real registry."""
    if request.param == "copy":
        algos = request.getfixturevalue("core_algos")
        return (_copied_compute_advantage(algos.get_adv_estimator_fn), _Data,
                types.SimpleNamespace(name="AlgoConfig stand-in"))
    from verl import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos as real
    from verl.trainer.ppo.ray_trainer import compute_advantage

    monkeypatch.setattr(real, "ADV_ESTIMATOR_REGISTRY", dict(real.ADV_ESTIMATOR_REGISTRY))
    monkeypatch.setattr(verl_adapter, "_REGISTERED", {})
    return (compute_advantage, lambda t, nt: DataProto.from_dict(tensors=t, non_tensors=nt), AlgoConfig())


def _golden_verl_data(make_data):
    """The golden worked example as a verl batch with the step fields stored (but, in stock verl, not forwarded)."""
    import torch

    tb, tlr, mask, fields = _golden_batch(np.arange(7))
    obj = lambda xs: np.array([str(x) for x in xs], dtype=object)  # noqa: E731 - verl's non-tensor arrays
    data = make_data({"token_level_rewards": torch.tensor(tlr, dtype=torch.float32),
                      "response_mask": torch.tensor(mask, dtype=torch.int64)},
                     {"uid": obj(fields["index"]), "anchor_obs": obj(fields["anchor_obs"]),
                      "traj_uid": obj(fields["traj_index"])})
    return tb, data


@pytest.mark.parametrize("name, register, cfg", [
    ("g2po", lambda c: verl_adapter.register("g2po", c), G2POConfig(gamma=0.5)),
    ("agentmill_gigpo", verl_adapter.register_baselines, GiGPOConfig(gamma=0.5))])
def test_stock_verl_call_is_refused_with_its_reason_and_compute_from_batch_works(stock_verl, name, register,
                                                                                 cfg) -> None:
    """Stock verl passes no step fields even when the batch stores them, and a GRPO stand-in would mislabel an
    experiment, so the estimator refuses: the message names what verl passed, what G2PO needs and why, and the hook
    that works. That hook, on the same batch, gives the table estimator's advantages."""
    compute_advantage, make_data, algo_config = stock_verl
    register(cfg)
    tb, data = _golden_verl_data(make_data)
    with pytest.raises(ValueError) as info:
        compute_advantage(data, name, config=algo_config)
    msg = str(info.value)
    assert "['config', 'index', 'response_mask', 'token_level_rewards']" in msg  # exactly what stock verl passed
    assert "stock verl" in msg and "neither stores nor forwards" in msg and "instead of computing GRPO" in msg
    assert "compute_from_batch(data, cfg)" in msg and "anchor_obs" in msg and "traj_uid" in msg
    adv, ret = verl_adapter.compute_from_batch(data, cfg)
    est = (g2po_advantages(tb, ExactKey(), cfg) if name == "g2po"
           else gigpo_advantages(tb, ExactKey(), cfg))
    mask = data.batch["response_mask"].numpy()
    np.testing.assert_allclose(adv.numpy(), est.advantages[:, None] * mask, atol=1e-6)
    np.testing.assert_allclose(data.batch["returns"].numpy(), est.returns[:, None] * mask, atol=1e-6)

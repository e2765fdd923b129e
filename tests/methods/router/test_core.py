"""Router: fit on a synthetic table whose features decide who is right; save/load; masking; config errors."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.router import OutcomeTable, Router, RouterConfig
from agentmill.methods.router import baselines as B
from agentmill.methods.router import metrics as M

WORDS = {"sum": 0, "capital": 1, "reverse": 2}


def _data(n: int, offset: int) -> tuple[list[str], dict[str, str], list[dict]]:
    rng = np.random.default_rng(offset)
    ids, texts, rows = [], {}, []
    for i in range(n):
        kind = list(WORDS)[i % 3]
        qid = f"q{offset + i}"
        ids.append(qid)
        texts[qid] = f"please {kind} item {rng.integers(1000)} now"
        for w, name in enumerate(["a", "b", "c"]):
            right = WORDS[kind] == w or (w == 0 and rng.random() < 0.3)  # worker a is a weak generalist
            rows.append({"query_id": qid, "worker": name, "score": float(right), "cost": [1.0, 0.01, 0.01][w]})
    return ids, texts, rows


@pytest.fixture(scope="module")
def fitted() -> tuple[Router, list[str], dict[str, str], OutcomeTable]:
    tr, t1, r1 = _data(90, 0)
    va, t2, r2 = _data(30, 1000)
    te, t3, r3 = _data(30, 2000)
    table = OutcomeTable.from_long(r1 + r2 + r3)
    router = Router(RouterConfig(es=False), ["a", "b", "c"])
    router.fit(table, tr, va, {**t1, **t2, **t3})
    return router, te, {**t1, **t2, **t3}, table


def test_router_beats_every_single_worker(fitted) -> None:
    router, te, texts, table = fitted
    Y = table.matrices(te, router.workers)[0]
    choice = np.array([router.workers.index(router.route(texts[q]).worker) for q in te])
    assert M.accuracy(choice, Y) == 1.0 > Y.mean(0).max()


def test_masking_falls_back_to_the_next_best(fitted) -> None:
    router, te, texts, _ = fitted
    d = router.route("please capital item 1 now")
    assert d.worker == "b" and not d.fallback
    d2 = router.route("please capital item 1 now", allowed={"a", "c"})
    assert d2.worker in {"a", "c"} and d2.fallback and d2.ranked[0] == d2.worker
    with pytest.raises(ValueError, match="not in this router"):
        router.route("x", allowed={"z"})
    with pytest.raises(ValueError, match="every worker"):
        router.route("x", allowed=set())


def test_save_load_round_trip(fitted, tmp_path) -> None:
    router, te, texts, _ = fitted
    router.save(tmp_path / "r.json")
    again = Router.load(tmp_path / "r.json")
    assert [again.route(texts[q]).worker for q in te] == [router.route(texts[q]).worker for q in te]
    with pytest.raises(ValueError, match="absent"):
        again.check_pool(["a", "b"])


def test_cost_lambda_auto_prefers_cheap_workers_at_equal_accuracy() -> None:
    tr, t1, r1 = _data(90, 0)
    va, t2, r2 = _data(30, 1000)
    table = OutcomeTable.from_long(r1 + r2)
    r = Router(RouterConfig(es=False, cost_lambda="auto"), ["a", "b", "c"])
    rep = r.fit(table, tr, va, {**t1, **t2})
    assert rep.lam > 0 and rep.per_lambda["0.0"]["val_acc"] - rep.val_acc <= 0.01
    assert rep.val_cost <= rep.per_lambda["0.0"]["val_cost"]


@pytest.mark.parametrize("kw,match", [({"tau": 0}, "tau"), ({"cost_lambda": 0.3}, "cost_lambda"),
                                      ({"sft": False, "es": False}, "sft"), ({"cost": "euros"}, "cost")])
def test_config_errors(kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        RouterConfig(**kw)


def test_baselines_and_metrics_by_hand() -> None:
    Y = np.array([[1, 0, 0], [0, 1, 0], [0, 1, 1], [0, 0, 0.0]])
    abstain = np.array([[False, True, True], [True, False, True], [True, False, False], [True, True, True]])
    C = np.ones_like(Y)
    score, cost, chosen = B.cascade(abstain, Y, C, np.array([2, 1, 0]))
    assert score.tolist() == [1, 1, 1, 0] and cost.tolist() == [3, 2, 1, 3] and chosen.tolist() == [0, 1, 2, -1]
    assert B.best_single(Y) == 1 and M.oracle(Y).tolist() == [1, 1, 1, 0]
    assert M.routing_entropy(np.array([0, 0, 0, 0]), 3) == 0.0
    assert M.routing_entropy(np.array([0, 1, 2]), 3) == pytest.approx(1.0)
    assert M.unique_solves(Y)[:, 0].tolist() == [True, False, False, False]
    assert M.gap_closure(0.75, 0.5, 1.0) == 0.5 and np.isnan(M.gap_closure(0.5, 0.5, 0.5))
    Xtr = np.eye(3)
    assert B.knn_route(Xtr, np.eye(3), np.eye(3), k=1).tolist() == [0, 1, 2]

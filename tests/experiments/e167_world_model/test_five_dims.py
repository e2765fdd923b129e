"""W-5: the bootstrap probability that factuality is the lowest dimension (hand-checkable and statistical cases), the
mixture helpers, and a smoke run of measure() and plots()."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.experiments.e167_world_model import MODULES
from agentmill.experiments.e167_world_model.five_dims import (
    CLAIMS,
    DIMS,
    EXPERIMENT,
    SETUPS,
    _balanced,
    _pick,
    cluster_of,
    fit_prompt,
    p_lowest,
)

NAN = float("nan")


def test_registered_and_pre_registered() -> None:
    assert "five_dims" in MODULES and EXPERIMENT.id == "e167.wm_five_dims_profile"
    (c,) = CLAIMS
    assert (c.metric, c.direction, c.threshold, c.rule) == ("w5_domains_factuality_lowest", ">=", 3.0, "exact")
    assert SETUPS["full"].p_level == 0.95 and SETUPS["full"].judged and not SETUPS["quick"].judged


def test_p_lowest_by_hand() -> None:
    # factuality (column 1) lowest in every cluster: probability 1
    x = np.array([[80, 10, NAN, 70, 60], [90, 20, NAN, 60, 50], [70, 0, NAN, 80, 70]], float)
    p, dims = p_lowest(x, ["a", "b", "c"], 1, n_boot=500)
    assert p == 1.0 and dims == [0, 1, 3, 4]  # consistency never applies: left out
    # a tie with quality everywhere: never strictly lowest
    y = x.copy()
    y[:, 4] = y[:, 1]
    assert p_lowest(y, ["a", "b", "c"], 1, n_boot=500)[0] == 0.0
    # another dimension clearly lower: probability 0
    z = x.copy()
    z[:, 0] = -5
    assert p_lowest(z, ["a", "b", "c"], 1, n_boot=500)[0] == 0.0
    with pytest.raises(ValueError):
        p_lowest(np.full((2, 5), NAN), ["a", "b"], 1)


def test_p_lowest_tracks_the_separation() -> None:
    """Factuality 5 points below realism with noise SD 10: the probability rises with the number of clusters."""
    rng = np.random.default_rng(0)

    def draw(n):
        x = np.column_stack([np.full(n, 90.0), 50 + rng.normal(0, 10, n), np.full(n, NAN), 55 + rng.normal(0, 10, n),
                             np.full(n, 90.0)])
        return p_lowest(x, [str(i) for i in range(n)], 1, n_boot=2000, seed=1)[0]

    small = np.mean([draw(8) for _ in range(10)])
    large = np.mean([draw(200) for _ in range(10)])
    assert 0.4 < small < large and large > 0.95


def test_clusters_balance_and_pick() -> None:
    assert cluster_of("factsearch", "w200123:Ka Lo:born") == "w200123"
    assert cluster_of("keydoor", "kd-5") == "kd-5" and cluster_of("textworld", "tw_1009") == "tw_1009"
    rng = np.random.default_rng(0)
    assert sorted(_balanced([1, 2, 3], 7, rng)).count(1) >= 2 and len(_balanced([1, 2, 3], 7, rng)) == 7
    assert len(set(_balanced(list(range(10)), 4, rng))) == 4
    with pytest.raises(ValueError):
        _balanced([], 3, rng)

    class E:
        def __init__(self, i, changed):
            self.task_id, self.t, self.changed = "x", i, changed

    exs = [E(i, i < 3) for i in range(10)]
    got = _pick(exs, 6, rng, balance_changed=True)
    assert sum(e.changed for e in got) == 3 and len(got) == 6


def test_fit_prompt_cuts_from_the_left() -> None:
    class ByteLM:
        def encode(self, s):
            return list(s.encode())

        def decode(self, ids):
            return bytes(ids).decode()

    assert fit_prompt(ByteLM(), "abcdef", 10) == "abcdef"
    assert fit_prompt(ByteLM(), "abcdef", 4) == "cdef"


@pytest.mark.slow  # ~5-10 s (torch import; + ~10 s of tw-make when the two smoke games are not cached yet)
def test_smoke_measure_and_plots(tmp_path, monkeypatch) -> None:
    pytest.importorskip("textworld")
    pytest.importorskip("torch")
    import shutil

    from agentmill.core.executor import make_executor
    from agentmill.core.paths import cache_root
    from agentmill.experiments.protocol import RunContext

    games = cache_root() / "world_model" / "textworld-games"
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    if all((games / f"tw_{s}{x}").is_file() for s in (1000, 1001) for x in (".z8", ".json")):
        dst = tmp_path / "cache" / "world_model" / "textworld-games"
        dst.mkdir(parents=True)
        for s in (1000, 1001):
            for x in (".json", ".z8"):
                shutil.copyfile(games / f"tw_{s}{x}", dst / f"tw_{s}{x}")
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    out = EXPERIMENT.measure(SETUPS["smoke"], ctx)
    assert "w5_domains_factuality_lowest_observed" in out
    assert set(ctx.data["domains"]) == {"keydoor", "factsearch", "textworld"}
    for d in ctx.data["domains"].values():
        assert 0.0 <= d["p_factuality_lowest"] <= 1.0 and set(d["means"]) == set(DIMS)
    paths = EXPERIMENT.plots(ctx.data, tmp_path)
    assert paths and all(p.is_file() for p in paths)

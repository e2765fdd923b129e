"""Tiny experiments for runner/CLI/report tests: one that passes, one that crashes, one that uses a model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentmill.core.stats import Estimate, mean_estimate
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class CoinSetup:
    n: int = 200
    p: float = 0.5
    seed: int = 0


def _measure_coin(setup: CoinSetup, ctx: RunContext) -> dict[str, Estimate]:
    rng = np.random.default_rng(setup.seed)
    flips = rng.random(setup.n) < setup.p
    ctx.progress("flipping", setup.n, setup.n)
    ctx.data["flips"] = flips.astype(int).tolist()
    return {"mean": mean_estimate(flips.astype(float)), "n": Estimate.exact(setup.n)}


def _plot_coin(data, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(np.cumsum(data["flips"]) / np.arange(1, len(data["flips"]) + 1))
    ax.set_xlabel("flips")
    ax.set_ylabel("running mean")
    path = Path(out_dir) / "running_mean.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return [path]


COIN = Experiment(
    id="fake.coin", title="A fair coin", paper="none",
    claims=(Claim(id="F-1", statement="a fair coin lands heads about half the time", source="folklore",
                  paper_value="0.5", metric="mean", direction="in", threshold=0.3, upper=0.7),
            Claim(id="F-2", statement="we flipped n coins", source="setup", paper_value="-", metric="n",
                  direction=">=", threshold=10, judge_on="exact", exact_why="the setup's own count of flips")),
    setups={"smoke": CoinSetup(n=20), "quick": CoinSetup(n=200), "full": CoinSetup(n=2000)},
    measure=_measure_coin, scale_note="a numpy coin", plots=_plot_coin,
)


def _measure_crash(setup: CoinSetup, ctx: RunContext) -> dict[str, Estimate]:
    raise RuntimeError("deliberate failure for the test")


CRASH = Experiment(
    id="fake.crash", title="Always crashes", paper="none",
    claims=(Claim(id="X-1", statement="never judged", source="-", paper_value="-", metric="m", direction=">=",
                  threshold=0),),
    setups={"smoke": CoinSetup(), "quick": CoinSetup(), "full": CoinSetup()},
    measure=_measure_crash, scale_note="-",
)


@dataclass(frozen=True)
class EchoSetup:
    prompts: int = 3


def _measure_echo(setup: EchoSetup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.lm import GenerateConfig

    lm = ctx.load_lm()
    outs = lm.generate([f"say {i}" for i in range(setup.prompts)], GenerateConfig(max_new_tokens=8, temperature=0))
    return {"nonempty": Estimate.exact(float(np.mean([bool(o.text) for o in outs])))}


ECHO = Experiment(
    id="fake.echo", title="A model answers", paper="none",
    claims=(Claim(id="E-1", statement="the model says something", source="-", paper_value="1", metric="nonempty",
                  direction=">=", threshold=1.0),),
    setups={"smoke": EchoSetup(), "quick": EchoSetup(), "full": EchoSetup()},
    measure=_measure_echo, scale_note="scripted", uses_model=True,
)

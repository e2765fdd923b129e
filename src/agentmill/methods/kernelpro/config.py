"""KernelPro's configuration: one frozen dataclass per concern, each field documented with its source.

Source tags: [P] the paper's abstract (arXiv 2606.26453), [S] secondary readings of it, [R] agentmill's own design,
[D] derived here and proved by a test, [M] measured on this project's machines. Every threshold the tools use is a
dimensionless margin; absolute machine numbers come from the measured roofline (``roofline.calibrate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MARCH = "x86-64-v3"
"""[R] Builds for fixtures and tables are pinned to this ``-march`` (AVX2 + FMA, 16 vector registers) so tables
from AVX2-only and AVX-512 hosts compare; ``-march=native`` is a flag action recorded with the detected ISA."""


@dataclass(frozen=True)
class TimingConfig:
    """How a candidate is timed (interleaved with the numpy reference in one child process)."""

    rse_target: float = 0.02
    """[R] stop repeating once the bootstrap relative standard error of the median is at most this."""
    max_repeats: int = 15
    """[R] at most this many interleaved (candidate, reference) repeats (the design's 50, lowered for the
    project's per-paper time budget; docs/methods/kernelpro.md, deviations)."""
    min_repeats: int = 5
    """[R] at least this many repeats before the RSE rule may stop."""
    min_batch_s: float = 1e-3
    """[R] calls shorter than this are timed in batches of m calls so a batch lasts at least this long."""
    threads: int = 1
    """[R] OMP/BLAS threads of the run child (recorded)."""
    budget_s: float = 3.0
    """[R] wall seconds of timing per candidate at most (the repeats stop early when it is spent)."""


@dataclass(frozen=True)
class WallConfig:
    """The correctness wall (docs/methods/kernelpro.md, "The wall")."""

    rtol: float = 1e-5
    """[R] relative tolerance of elementwise ops."""
    rtol_reassoc: float = 1e-4
    """[R] relative tolerance when the task allows reassociation."""
    atol_scaled: float = 1e-6
    """[R] absolute tolerance, scaled by max|reference| of the output (an unscaled atol lets zeros pass)."""
    reduction_c: float = 4.0
    """[R] margin c of the probabilistic rounding bound c·sqrt(K)·eps32·sum|terms| for reductions."""
    seeds: int = 3
    """[R] input seeds per shape."""
    rotate_inputs: int = 3
    """[R] distinct input sets the timed calls rotate among (anti-caching)."""
    plausibility: float = 0.9
    """[R] a candidate faster than this fraction of the roofline minimum time is rejected as implausible."""
    allow_library: bool = False
    """[R] whether BLAS symbols may be linked (the no-library track forbids them)."""


@dataclass(frozen=True)
class SearchConfig:
    """MCTS and its baselines (docs/methods/kernelpro.md, "Search")."""

    budget: int = 40
    """[R] evaluations per search."""
    c_uct: float = 0.5
    """[R] UCT exploration constant."""
    widen_k: float = 1.0
    """[R] progressive widening: a node may have ceil(k·N^alpha) children."""
    widen_alpha: float = 0.5
    """[R] progressive widening exponent."""
    root_k: float = 3.0
    """[R] asymmetric branching: the root's k (more initial diversity) [P names the idea]."""
    dead_end_k: int = 3
    """[R] a node whose last this many expansions all failed or regressed is exhausted (dead-end pruning [P])."""
    regress_margin: float = 0.05
    """[R] an expansion 'regresses' when its speed is more than this fraction below its parent's."""
    reward: Literal["log", "linear"] = "log"
    """[P name; R form] log: clip(log(t_ref/t)/log(S_cap), -1, 1); linear: clip((t_ref/t - 1)/(S_cap - 1), -1, 1)."""
    guided_weight: float = 4.0
    """[R] proposer weight w: an action recommended by a firing tool is drawn with weight 1 + w (w = 0: unguided)."""
    seed: int = 0
    """Seed of the proposer's and the tie-breaks' random draws."""


@dataclass(frozen=True)
class ToolThresholds:
    """The 15 tools' dimensionless margins (docs/methods/kernelpro.md, "Tools"). Absolute values come from the
    measured roofline, never from a constant."""

    packed_share: float = 0.5
    """[R] ScalarFallback: packed share of hot-loop FP ops below this fires."""
    wide_share: float = 0.5
    """[R] NarrowVectors: share of packed ops at the target's widest width below this fires."""
    stack_ops: int = 2
    """[R] StackSpill: more stack operands than this per hot-loop iteration fires."""
    strided_miss_factor: float = 1.5
    """[R; S: 1.2 x ideal for uncoalesced] StridedAccess: simulated D1 read-miss ratio above this × ideal fires."""
    blocking_miss_factor: float = 2.0
    """[R] CacheBlocking: simulated LL misses above this × compulsory fires."""
    thread_min_s: float = 200e-6
    """[R] ThreadUnderuse: a single-threaded call longer than this fires."""
    dispatch_share: float = 0.20
    """[S: the paper's 20 % launch-overhead trigger] DispatchOverhead: fitted t0/t above this fires."""
    roof_share: float = 0.8
    """[S: DRAM > 80 %] AtMemoryRoof: achieved bandwidth at least this × the level's measured bandwidth."""
    temporaries_factor: float = 1.5
    """[R] Temporaries: peak allocation during a call above this × output bytes fires."""
    mispredict_rate: float = 0.05
    """[R] BranchMispredict: simulated conditional mispredict rate above this fires."""
    library_share: float = 0.3
    """[R] LibraryDelegation: compute-bound work achieving below this × peak fires."""
    denormal_share: float = 0.01
    """[R] Denormals: at least this share of subnormal inputs ..."""
    denormal_slowdown: float = 2.0
    """[R] ... and at least this slowdown against the same data rescaled to the normal range fires."""
    contention_speedup: float = 1.1
    """[R] ParallelContention: 2-thread speedup below this with shared/locked accumulators fires."""
    ir_factor: float = 2.0
    """[R] InstructionOverhead: instructions per element above this × the ruler minimum fires."""


@dataclass(frozen=True)
class KernelProConfig:
    """The whole method's configuration."""

    timing: TimingConfig = TimingConfig()
    wall: WallConfig = WallConfig()
    search: SearchConfig = SearchConfig()
    tools: ToolThresholds = ToolThresholds()
    march: str = MARCH
    """The pinned ``-march`` of builds (:data:`MARCH`)."""

"""Hand-checkable unit tests of KernelPro's pure parts: tasks and eager formulations, the library's spaces and
rendering, the C source policy, assembly classification on recorded snippets, the 15 tools on synthetic profiles,
the reward and search on toy tables, Stage-1 rules on synthetic ceilings, the CUDA parsers and occupancy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.methods.kernelpro import asm, cbackend, cuda, harness, library, roofline, search
from agentmill.methods.kernelpro.config import SearchConfig, ToolThresholds
from agentmill.methods.kernelpro.feedback import Profile, render_feedback, severity
from agentmill.methods.kernelpro.tasks import TASKS, get_task
from agentmill.methods.kernelpro.tools import TOOLS, MicroTool, diagnose, register_tool


def test_eager_formulations_match_the_float32_references() -> None:
    rng = np.random.default_rng(0)
    for t in TASKS.values():
        shape = t.sizes["S"]
        a = t.make(shape, rng, "normal")
        got = eval("lambda a: " + harness.EAGER[t.name], {"np": np})(a)
        np.testing.assert_allclose(np.asarray(got, np.float64).reshape(t.out_shape(shape)), t.ref64(*a),
                                   rtol=2e-4, atol=2e-4 * float(np.abs(t.ref64(*a)).max()))


def test_unknown_task_and_size_are_clear_errors() -> None:
    with pytest.raises(KeyError, match="tasks: vadd"):
        get_task("nope")
    with pytest.raises(KeyError, match="sizes"):
        from agentmill.methods.kernelpro.tasks import shape_for

        shape_for(get_task("sum"), "XXL")


def test_spaces_roots_and_neighbours() -> None:
    assert library.space_size("sum", "full") == 320 and library.space_size("transpose", "quick") == 48
    assert [library.space_size(t, "full") for t in ("transpose", "softmax_rows", "layernorm")] == [192, 160, 160]
    for t in library.SPACES:
        pts = library.enumerate_space(t, "quick")
        assert library.root(t, "quick") in pts and len(set(pts)) == len(pts)
    r = library.root("sum", "smoke")
    nb = library.neighbours("sum", r, "smoke")
    assert sorted(a for a, _ in nb) == ["acc=8", "fm=1"]  # opt has one value in the smoke space
    assert library.flags_of({"opt": "O3", "fm": 1}) == ("-O3", "-march=x86-64-v3", "-ffast-math")


def test_proposer_weights_recommended_actions() -> None:
    prop = library.Proposer("sum", "quick", w=4.0)
    r = library.root("sum", "quick")
    rng = np.random.default_rng(0)
    picks = [prop.propose(r, [("fm", 1)], set(), rng)[0] for _ in range(2000)]
    n = len(library.neighbours("sum", r, "quick"))
    share = picks.count("fm=1") / len(picks)
    assert abs(share - 5 / (n + 4)) < 4 * math.sqrt(share * (1 - share) / len(picks))  # weight 1 + w among n
    unguided = library.Proposer("sum", "quick", w=0.0)
    picks0 = [unguided.propose(r, [("fm", 1)], set(), rng)[0] for _ in range(2000)]
    assert abs(picks0.count("fm=1") / 2000 - 1 / n) < 4 * math.sqrt((1 / n) * (1 - 1 / n) / 2000)


@pytest.mark.parametrize("src, why", [
    ("#include <stdio.h>\nvoid kernel(){}", "stdio.h"),
    ("void kernel(){ system(\"x\"); }", "system"),
    ("void kernel(){ __asm__(\"nop\"); }", "__asm__"),
    ("void kernel(){ execve(0,0,0); }", "execve"),
    ("void other(){}", "defines no"),
])
def test_source_policy_rejects(src: str, why: str) -> None:
    with pytest.raises(cbackend.PolicyError, match=why):
        cbackend.check_policy(src)


def test_source_policy_ignores_comments_and_accepts_library_sources() -> None:
    cbackend.check_policy("/* system() */ // fopen\n#include <math.h>\nvoid kernel(float* x) { x[0] = expf(1); }")
    for t in library.TEMPLATES:
        cbackend.check_policy(library.render(t, library.root(t, "quick"))[0])


SUM_INORDER = """
0000000000001100 <kernel>:
    1100:	test   %rdx,%rdx
    1103:	jle    1130 <kernel+0x30>
    1105:	vxorps %xmm0,%xmm0,%xmm0
    1109:	lea    (%rdi,%rdx,4),%rax
    1110:	vaddss (%rdi),%xmm0,%xmm0
    1114:	add    $0x4,%rdi
    1118:	cmp    %rax,%rdi
    111b:	jne    1110 <kernel+0x10>
    111d:	vmovss %xmm0,(%rsi)
    1121:	ret
"""
SUM_FAST = """
0000000000001100 <kernel>:
    1100:	vxorps %xmm0,%xmm0,%xmm0
    1104:	vaddps (%rax),%ymm0,%ymm0
    1108:	add    $0x20,%rax
    110c:	cmp    %rcx,%rax
    110f:	jne    1104 <kernel+0x4>
    1111:	vaddss (%rdi,%r8,4),%xmm1,%xmm1
    1117:	vaddss 0x4(%rdi,%r8,4),%xmm1,%xmm1
    111d:	vaddss 0x8(%rdi,%r8,4),%xmm1,%xmm1
    1123:	add    $0x1,%r8
    1127:	cmp    %r8,%rdx
    112a:	jne    1111 <kernel+0x11>
    112c:	vcvtss2sd %xmm1,%xmm1,%xmm1
    1130:	ret
"""
NESTED = """
0000000000001100 <kernel>:
    1100:	xor    %eax,%eax
    1102:	xor    %ecx,%ecx
    1104:	vmulss (%rdi,%rcx,4),%xmm0,%xmm1
    1109:	vmovss %xmm1,-0x8(%rsp)
    110f:	vmovss -0x8(%rsp),%xmm2
    1115:	add    $0x1,%rcx
    1119:	cmp    $0x10,%rcx
    111d:	jne    1104 <kernel+0x4>
    111f:	add    $0x1,%rax
    1123:	cmp    %rdx,%rax
    1126:	jne    1102 <kernel+0x2>
    1128:	lock addl $0x1,(%rsi)
    112d:	ret
"""


def test_hot_loop_on_recorded_snippets() -> None:
    h = asm.hot_loop(SUM_INORDER)
    assert (h.scalar_fp, h.packed_fp, h.n_insns, h.packed_share) == (1, 0, 4, 0.0)
    f = asm.hot_loop(SUM_FAST)  # the ymm main loop, not its scalar epilogue (stride 0x20 beats 0x1)
    assert (f.packed_fp, f.scalar_fp, f.packed_by_width["256"]) == (1, 0, 1)
    assert asm.whole(SUM_FAST).scalar_fp == 3 and asm.whole(SUM_FAST).f2d_conv == 1  # what whole counts would say
    lps = asm.loops(asm.kernel_insns(NESTED))
    assert sorted(lp.depth for lp in lps) == [0, 1]
    inner = asm.hot_loop(NESTED)
    assert inner.depth == 1 and inner.stack_ops == 2 and inner.stack_reloads == 1 and inner.lock == 0
    assert asm.hot_loop("0000000000001100 <kernel>:\n    1100:\tret\n") is None


def _hot(**kw) -> asm.HotLoop:
    base = dict(func="kernel", start=0, end=1, n_insns=8, scalar_fp=0, packed_fp=4,
                packed_by_width={"128": 0, "256": 4, "512": 0}, fp64=0, half_conv=0, f2d_conv=0, stack_ops=0,
                stack_reloads=0, calls=[], cond_branches=0, lock=0, syscall=0)
    base.update(kw)
    return asm.HotLoop(**base)


class R:
    cls, headroom = "memory", 10.0


CASES = {  # tool → (profile that fires, profile that stays silent)
    "ScalarFallback": (Profile("sum", (8,), hot=_hot(scalar_fp=8, packed_fp=0)), Profile("sum", (8,), hot=_hot())),
    "NarrowVectors": (Profile("vadd", (8,), hot=_hot(packed_by_width={"128": 4, "256": 0, "512": 0})),
                      Profile("vadd", (8,), hot=_hot())),
    "StackSpill": (Profile("sum", (8,), hot=_hot(stack_ops=4, stack_reloads=1)), Profile("sum", (8,), hot=_hot())),
    "StridedAccess": (Profile("transpose", (8,), signals={"d1_read_miss_ratio": 0.5}),
                      Profile("transpose", (8,), signals={"d1_read_miss_ratio": 0.0625})),
    "CacheBlocking": (Profile("gemm", (8,), signals={"d1_read_miss_ratio": 0.1, "ll_misses_over_compulsory": 8.0,
                                                     "working_set": 4e6, "l2_bytes": 1e6}),
                      Profile("gemm", (8,), signals={"d1_read_miss_ratio": 0.1, "ll_misses_over_compulsory": 1.2,
                                                     "working_set": 4e6, "l2_bytes": 1e6})),
    "ThreadUnderuse": (Profile("sum", (8,), signals={"t": 1e-3, "uses_omp": False, "cores": 2}),
                       Profile("sum", (8,), signals={"t": 1e-3, "uses_omp": True, "cores": 2})),
    "DispatchOverhead": (Profile("vadd", (8,), signals={"dispatch_share": 0.6}),
                         Profile("vadd", (8,), signals={"dispatch_share": 0.05})),
    "AtMemoryRoof": (Profile("vadd", (8,), signals={"bw_fraction": 0.85, "ruler_bw_fraction": 1.0}),
                     Profile("vadd", (8,), signals={"bw_fraction": 0.3, "ruler_bw_fraction": 1.0})),
    "Temporaries": (Profile("vadd", (8,), signals={"alloc_peak_ratio": 3.0}),
                    Profile("vadd", (8,), signals={"alloc_peak_ratio": 0.0})),
    "BranchMispredict": (Profile("sum", (8,), hot=_hot(cond_branches=1), signals={"d1_read_miss_ratio": 0.1,
                                                                                   "mispredict_rate": 0.25}),
                         Profile("sum", (8,), hot=_hot(cond_branches=0), signals={"d1_read_miss_ratio": 0.1,
                                                                                   "mispredict_rate": 0.25})),
    "LibraryDelegation": (Profile("gemm", (8,), signals={"compute_fraction": 0.05}),
                          Profile("gemm", (8,), signals={"compute_fraction": 0.9})),
    "PrecisionMismatch": (Profile("vadd", (8,), hot=_hot(f2d_conv=2)), Profile("vadd", (8,), hot=_hot())),
    "Denormals": (Profile("vadd", (8,), signals={"subnormal_share": 1.0, "denormal_slowdown": 5.0}),
                  Profile("vadd", (8,), signals={"subnormal_share": 1.0, "denormal_slowdown": 1.1})),
    "ParallelContention": (Profile("sum", (8,), hot=_hot(lock=1), signals={"speedup_2t": 0.2}),
                           Profile("sum", (8,), hot=_hot(lock=0), signals={"speedup_2t": 0.2})),
    "InstructionOverhead": (Profile("vadd", (8,), signals={"d1_read_miss_ratio": 0.1, "ir_per_elem": 6.0,
                                                           "ir_ruler_per_elem": 0.75}),
                            Profile("vadd", (8,), signals={"d1_read_miss_ratio": 0.1, "ir_per_elem": 0.8,
                                                           "ir_ruler_per_elem": 0.75})),
}


class Compute:
    cls, headroom = "compute", 10.0


@pytest.mark.parametrize("tool", [t.name for t in TOOLS])
def test_each_tool_fires_on_its_positive_and_not_its_negative(tool: str) -> None:
    pos, neg = CASES[tool]
    rep = Compute() if tool == "LibraryDelegation" else R()
    runs = [diagnose(pos, rep, tools=(tool,), affinity=False)[0] for _ in range(3)]
    assert len(runs[0]) == 1 and runs[0][0].tool == tool
    assert all([f.to_dict() for f in r] == [f.to_dict() for f in runs[0]] for r in runs)  # deterministic
    assert diagnose(neg, rep, tools=(tool,), affinity=False)[0] == []
    f = runs[0][0]
    assert f.expected_gain[1] <= 10.0 and f.actions and f.analysis and f.recommendation  # capped by the headroom


def test_fifteen_tools_registry_and_affinity() -> None:
    assert len(TOOLS) == 15 and len({t.name for t in TOOLS}) == 15
    with pytest.raises(ValueError, match="duplicate"):
        register_tool(MicroTool("ScalarFallback", frozenset(), frozenset(), "", lambda p, r, t: None))
    prof = Profile("gemm", (8,), signals={"compute_fraction": 0.05})
    _, skipped = diagnose(prof, R())  # memory class: LibraryDelegation (compute affinity) must not run
    assert "affinity" in skipped["LibraryDelegation"]
    assert "not collected" in skipped["StridedAccess"]


def test_severity_and_rendering() -> None:
    assert (severity((2.0, 8)), severity((1.2, 2)), severity((1.0, 1.3))) == ("critical", "warning", "info")
    fs, _ = diagnose(CASES["ScalarFallback"][0], R(), tools=("ScalarFallback",), affinity=False)
    assert render_feedback(fs, None, "none") == ""
    assert render_feedback(fs, None, "diagnoses").startswith("[ScalarFallback · critical]")
    assert render_feedback(fs, None, "raw").startswith('{"ScalarFallback"')


def test_reward_forms() -> None:
    o = search.Outcome(True, 4.0)
    assert search.reward(o, 16.0) == pytest.approx(0.5)  # log 4 / log 16
    assert search.reward(o, 16.0, "linear") == pytest.approx(3 / 15)
    assert search.reward(search.Outcome(False, math.nan), 16.0) == -1.0
    assert search.reward(search.Outcome(True, 100.0), 16.0) == 1.0
    assert search.reward(search.Outcome(True, 1.2), 1.0) == pytest.approx(math.log(1.2) / math.log(1.5))


def _toy(p) -> search.Outcome:
    d = dict(p)
    if d["acc"] == 2 and d["fm"] == 1:
        return search.Outcome(False, math.nan)
    return search.Outcome(True, (1 + d["acc"]) * (2 if d["fm"] else 1) / (1 + 0.1 * d["unroll"]) *
                          (1.1 if d["opt"] == "O3" else 1), (("fm", 1),) if not d["fm"] else ())


def test_searches_never_repeat_respect_budget_and_are_deterministic() -> None:
    for algo in ("mcts", "greedy", "random"):
        a = search.run_algo(algo, "sum", _toy, SearchConfig(budget=15, seed=3), which="quick", s_cap=20)
        b = search.run_algo(algo, "sum", _toy, SearchConfig(budget=15, seed=3), which="quick", s_cap=20)
        keys = [tuple(sorted(e["params"].items())) for e in a.evaluated]
        assert len(keys) == len(set(keys)) == 15  # transposition: no candidate evaluated twice
        assert a.curve == b.curve and a.best == b.best
        assert all(x <= y for x, y in zip(a.curve, a.curve[1:]))


def test_mcts_root_widening_and_failed_children_are_leaves() -> None:
    calls = []

    def ev(p):
        calls.append(p)
        return search.Outcome(len(calls) % 2 == 1, 1.0 + len(calls) * 0.01)

    r = search.mcts("sum", ev, SearchConfig(budget=4, seed=0, root_k=3.0), which="quick", s_cap=4)
    # root evaluated, then the root may hold ceil(3 * N^0.5) children: N=1 → 3, so the next 3 expansions are all
    # children of the root (asymmetric branching) and failed ones are never expanded
    assert len(r.evaluated) == 4
    roots = {tuple(sorted(e["params"].items())) for e in r.evaluated[1:]}
    nb = {q for _, q in library.neighbours("sum", library.root("sum", "quick"), "quick")}
    assert roots <= nb


def test_dead_end_pruning_stops_a_search_that_only_fails() -> None:
    ev = (lambda p: search.Outcome(p == library.root("sum", "smoke"), 1.0))
    r = search.mcts("sum", ev, SearchConfig(budget=40, seed=0), which="smoke", s_cap=2)
    assert len(r.evaluated) == 3  # the root and its only two neighbours; then nothing is left to widen


def test_evals_to_reach() -> None:
    assert search.evals_to_reach([math.nan, 1.0, 2.0, 2.0], 1.9, 4) == 3
    assert search.evals_to_reach([1.0, 1.0], 5.0, 2) == 3


def _ceil() -> roofline.Ceilings:
    return roofline.Ceilings({"avx2/1": 100.0}, {"avx2/1": 0.01}, {"L1/1": 200.0, "L2/1": 100.0, "L3/1": 50.0,
                                                                     "DRAM/1": 20.0},
                             {"L1/1": 0.01, "L2/1": 0.01, "L3/1": 0.02, "DRAM/1": 0.03}, 1e-6, 0.05, {"1": 90.0},
                             {"1": 0.02}, "Haswell", {"L1": 32768, "L2": 1 << 20, "L3": 32 << 20}, {"cpu": "x"})


def test_stage1_rules_on_synthetic_ceilings() -> None:
    c = _ceil()
    assert roofline.analytic_class(0.1, 5.0, 1e-3, 1e-6) == "memory"
    assert roofline.analytic_class(10.0, 5.0, 1e-3, 1e-6) == "compute"
    assert roofline.analytic_class(5.0, 5.0, 1e-3, 1e-6) == "mixed"
    assert roofline.analytic_class(5.0, 5.0, 4e-6, 1e-6) == "latency"
    assert roofline.measured_class(0.1, 0.9, 1e-3, 1e-6) == "memory"
    assert roofline.measured_class(0.9, 0.85, 1e-3, 1e-6) == "mixed"
    assert roofline.measured_class(0.9, 0.1, 5e-6, 1e-6) == "latency"
    g = get_task("gemm")
    rep = roofline.classify_time(g, (512,), 2 * 512 ** 3 / 80e9, c)  # 80 GFLOP/s of a 100 GFLOP/s peak
    assert (rep.analytic, rep.measured, rep.confidence) == ("compute", "compute", "high")
    assert rep.headroom == pytest.approx(100 / 80)
    v = roofline.classify_time(get_task("vadd"), (1 << 24,), 12 * (1 << 24) / 10e9, c)
    assert v.level == "DRAM" and v.cls == "memory"
    assert c.bw("L3") == 50.0 and c.level_of(2 << 20) == "L3" and c.generous_bw() == pytest.approx(200 / 1.03)


def test_cache_geometry_from_a_fake_sysfs(tmp_path) -> None:
    for i, (lvl, typ, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                          (3, "Unified", "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{lvl}\n")
        (d / "type").write_text(f"{typ}\n")
        (d / "size").write_text(f"{size}\n")
    assert roofline.cache_geometry(str(tmp_path)) == {"L1": 48 << 10, "L2": 1 << 20, "L3": 32 << 20}


PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'localarr' for 'sm_90'
ptxas info    : Function properties for localarr
    1024 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 1024 bytes cumulative stack size
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
    752 bytes stack frame, 1344 bytes spill stores, 1440 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 4096 bytes smem
"""
SASS = """
        Function : vec4
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P0 LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0020*/                   STG.E.128 desc[UR4][R6.64], R4 ;
        Function : mm_tc
        /*0000*/                   HMMA.16816.F32 R4, R8, R12, RZ ;
        /*0010*/                   LDG.E R2, desc[UR4][R2.64] ;
"""


def test_cuda_parsers_and_static_tools() -> None:
    info = cuda.parse_ptxas(PTXAS)
    assert (info["localarr"].stack_bytes, info["localarr"].spill_stores, info["localarr"].registers) == (1024, 0, 32)
    assert (info["spill"].spill_stores, info["spill"].spill_loads, info["spill"].smem_bytes) == (1344, 1440, 4096)
    h = cuda.parse_sass(SASS)
    assert h["vec4"]["LDG.E.128.CONSTANT"] == 1 and h["mm_tc"]["HMMA.16816.F32"] == 1
    assert "LocalMemory" in cuda.static_findings("localarr", info["localarr"], h["vec4"])
    assert "RegisterSpill" in cuda.static_findings("spill", info["spill"], h["vec4"])
    assert "Vectorization" not in cuda.static_findings("v", info["localarr"], h["vec4"], contiguous=True)
    assert "TensorCore" not in cuda.static_findings("m", info["localarr"], h["mm_tc"], matmul_like=True)
    assert "TensorCore" in cuda.static_findings("m", info["localarr"], h["vec4"], matmul_like=True)


@pytest.mark.parametrize("regs, tpb, smem, arch, occ, lim", [
    (32, 256, 0, "sm_80", 1.0, "warps"), (128, 256, 0, "sm_90", 0.25, "registers"),
    (32, 128, 48 * 1024, "sm_80", 0.1875, "shared memory"), (32, 128, 48 * 1024, "sm_90", 0.25, "shared memory"),
    (64, 64, 0, "sm_80", 0.5, "registers")])
def test_occupancy_hand_computed(regs, tpb, smem, arch, occ, lim) -> None:
    got = cuda.occupancy(regs, tpb, smem, arch)
    assert got[0] == pytest.approx(occ) and got[2] == lim


def test_cuda_source_to_cpu_backend_is_refused() -> None:
    with pytest.raises(cbackend.PolicyError):
        cbackend.check_policy('extern "C" __global__ void k(float* x) {}')
    with pytest.raises(ValueError, match="not a CUDA source"):
        cuda.compile_cuda("void kernel(float* x) {}")


def test_thresholds_are_dimensionless() -> None:
    th = ToolThresholds()
    assert th.dispatch_share == 0.20 and th.roof_share == 0.8 and th.packed_share == 0.5

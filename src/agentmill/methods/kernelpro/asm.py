"""Assembly inspection, the CPU stand-in for SASS checks: find the hot loop and classify its instructions.

Loops are backward jumps (target address <= jump address); a loop's body is [target, jump]; nesting is by
containment. The hot loop is the loop with the most valgrind instruction counts when those exist, else the innermost
loop with the most FP/SIMD instructions. Whole-function counts mislead (a vectorised loop keeps a scalar epilogue),
so tools read the hot loop only."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

LINE = re.compile(r"^\s*([0-9a-f]+):\s+(?:(lock|rep|repz|repnz|notrack|bnd)\s+)?([a-z][a-z0-9.]*)\s*(.*)$")
FUNC = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")
FP = r"(?:add|sub|mul|div|min|max|sqrt|fn?m(?:add|sub)\d*)"
SCALAR_FP = re.compile(rf"^v?{FP}s[sd]$")
PACKED_FP = re.compile(rf"^v?{FP}p[sd]$")
HALF_CONV = re.compile(r"^vcvt(?:ps2ph|ph2ps)")
F2D_CONV = re.compile(r"^v?cvt(?:ss2sd|ps2pd|sd2ss|pd2ps)")
RUNTIME = {"deregister_tm_clones", "register_tm_clones", "__do_global_dtors_aux", "frame_dummy", "_init", "_fini"}


@dataclass(frozen=True)
class Insn:
    addr: int
    mnem: str
    ops: str
    prefix: str = ""
    func: str = ""


@dataclass
class HotLoop:
    """Instruction classes of one loop body, per iteration."""

    func: str
    start: int
    end: int
    n_insns: int
    scalar_fp: int
    packed_fp: int
    packed_by_width: dict[str, int]
    fp64: int
    half_conv: int
    f2d_conv: int
    stack_ops: int
    stack_reloads: int
    calls: list[str]
    cond_branches: int
    lock: int
    syscall: int
    depth: int = 0

    @property
    def packed_share(self) -> float:
        n = self.scalar_fp + self.packed_fp
        return self.packed_fp / n if n else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "packed_share": self.packed_share}


def parse(text: str) -> list[Insn]:
    """objdump ``-d --no-show-raw-insn -M att`` text → instructions (with their function)."""
    out, func = [], ""
    for line in text.splitlines():
        m = FUNC.match(line.strip())
        if m:
            func = m.group(2)
            continue
        m = LINE.match(line)
        if m:
            out.append(Insn(int(m.group(1), 16), m.group(3), m.group(4).split("#")[0].strip(), m.group(2) or "", func))
    return out


def _target(i: Insn) -> int | None:
    if not i.mnem.startswith("j"):
        return None
    m = re.match(r"([0-9a-f]+)\s*<", i.ops)
    return int(m.group(1), 16) if m else None


@dataclass
class Loop:
    func: str
    start: int
    end: int
    insns: list[Insn] = field(default_factory=list)
    depth: int = 0


def loops(insns: list[Insn]) -> list[Loop]:
    """Every loop (backward jump) with its body and nesting depth (number of enclosing loops)."""
    found = []
    for i in insns:
        t = _target(i)
        if t is not None and t <= i.addr:
            body = [x for x in insns if t <= x.addr <= i.addr and x.func == i.func]
            found.append(Loop(i.func, t, i.addr, body))
    for lp in found:
        lp.depth = sum(1 for o in found if o is not lp and o.func == lp.func and o.start <= lp.start
                       and lp.end <= o.end and (o.start, o.end) != (lp.start, lp.end))
    return found


def _width(ops: str) -> str:
    for reg in ("zmm", "ymm", "xmm"):
        if f"%{reg}" in ops:
            return {"zmm": "512", "ymm": "256", "xmm": "128"}[reg]
    return "128"


def classify(body: list[Insn], lp: Loop | None = None) -> HotLoop:
    widths = {"128": 0, "256": 0, "512": 0}
    sc = pk = f64 = hc = fd = st = cb = lk = sy = 0
    calls: list[str] = []
    slots_st: set[str] = set()
    slots_ld: set[str] = set()
    back = body[-1].addr if body else -1
    for i in body:
        m = i.mnem
        if SCALAR_FP.match(m):
            sc += 1
            f64 += m.endswith("sd")
        elif PACKED_FP.match(m):
            pk += 1
            widths[_width(i.ops)] += 1
            f64 += m.endswith("pd")
        if HALF_CONV.match(m):
            hc += 1
        if F2D_CONV.match(m):
            fd += 1
        mem = re.findall(r"(-?0x[0-9a-f]+|-?\d+)?\(%r[sb]p\)", i.ops)
        if mem:
            st += 1
            slot = re.search(r"(-?0x[0-9a-f]+|-?\d+)?\(%r[sb]p\)", i.ops).group(0)  # type: ignore[union-attr]
            # AT&T: the destination is the last operand
            (slots_st if i.ops.rstrip().endswith(slot) and m.startswith(("vmov", "mov")) else slots_ld).add(slot)
        if m == "call":
            name = re.search(r"<([^>]+)>", i.ops)
            calls.append(name.group(1) if name else i.ops)
        if m.startswith("j") and m != "jmp" and i.addr != back:
            cb += 1
        if i.prefix == "lock":
            lk += 1
        if m == "syscall":
            sy += 1
    return HotLoop(lp.func if lp else "", lp.start if lp else 0, lp.end if lp else 0, len(body), sc, pk, widths, f64,
                   hc, fd, st, len(slots_st & slots_ld), calls, cb, lk, sy, lp.depth if lp else 0)


def kernel_insns(text: str) -> list[Insn]:
    """Instructions of the candidate's own functions (runtime stubs and PLT left out)."""
    return [i for i in parse(text) if i.func and i.func not in RUNTIME and "@plt" not in i.func
            and not i.func.startswith(".")]


def stride(lp: Loop) -> int:
    """The loop's largest constant induction step (``add $imm, %reg`` or ``lea imm(%reg), %reg``): the main,
    vectorised or unrolled loop advances furthest per iteration, its scalar epilogue by one element."""
    best = 0
    for i in lp.insns:
        m = re.match(r"\$0x([0-9a-f]+),%(r\w+)$", i.ops) if i.mnem in ("add", "sub") else None
        if m and m.group(2) not in ("rsp", "rbp"):
            best = max(best, int(m.group(1), 16))
        m = re.match(r"0x([0-9a-f]+)\(%(r\w+)\),%(r\w+)$", i.ops) if i.mnem == "lea" else None
        if m and m.group(2) == m.group(3):
            best = max(best, int(m.group(1), 16))
    return best


def hot_loop(text: str, ir_by_addr: dict[int, int] | None = None) -> HotLoop | None:
    """The hot loop of a disassembly (None when the code has no loop)."""
    return hot_loop_of(kernel_insns(text), ir_by_addr)


def innermost(lps: list[Loop]) -> list[Loop]:
    """The loops that contain no other loop."""
    return [lp for lp in lps if not any(o is not lp and lp.start <= o.start and o.end <= lp.end
                                        and (o.start, o.end) != (lp.start, lp.end) for o in lps)]


def hot_loop_of(insns: list[Insn], ir_by_addr: dict[int, int] | None = None) -> HotLoop | None:
    """The hot loop of an instruction list (None when it has no loop)."""
    lps = loops(insns)
    if not lps:
        return None
    if ir_by_addr:
        best = max(lps, key=lambda lp: sum(ir_by_addr.get(i.addr, 0) for i in lp.insns))
    else:
        def fp_count(lp: Loop) -> int:
            return sum(1 for i in lp.insns if SCALAR_FP.match(i.mnem) or PACKED_FP.match(i.mnem)
                       or F2D_CONV.match(i.mnem) or HALF_CONV.match(i.mnem))

        inner = [lp for lp in lps if not any(o is not lp and lp.start <= o.start and o.end <= lp.end
                                             and (o.start, o.end) != (lp.start, lp.end) for o in lps)]
        best = max(inner, key=lambda lp: (stride(lp), fp_count(lp), len(lp.insns)))
    return classify(best.insns, best)


def whole(text: str) -> HotLoop:
    """Counts over every instruction of the candidate's functions (what misleads: epilogues included)."""
    return classify(kernel_insns(text))


# ------------------------------------------------------------------------------------------- LLVM assembler text
_LLVM_WRAPPERS = ("_ZN7cpython", "cfunc.", "_ZN8cpython")
"""numba's ``inspect_asm`` also holds the CPython wrapper of the kernel; only the kernel's own function counts."""
_INT_SUFFIXED = {"add", "sub", "lea", "call", "ret", "jmp", "inc", "dec", "cmp", "mov", "xor", "and", "or", "test",
                 "imul", "shl", "sar", "shr", "push", "pop", "neg", "not", "movabs"}


def _norm_ops(mnem: str, ops: str) -> str:
    ops = re.sub(r",\s+", ",", ops.strip())
    ops = re.sub(r"\$(-?\d+)\b(?!\()", lambda m: f"${'-' if m.group(1).startswith('-') else ''}0x{abs(int(m.group(1))):x}",
                 ops)
    if mnem == "lea":
        ops = re.sub(r"^(\d+)\(", lambda m: f"0x{int(m.group(1)):x}(", ops)
    return ops


def parse_llvm(text: str) -> list[Insn]:
    """LLVM AT&T assembler text (numba's ``dispatcher.inspect_asm(signature)``) → instructions in the form
    :func:`parse` gives for objdump: ordinal addresses, branch targets resolved from labels to ``<addr> <label>``,
    integer mnemonics without their size suffix (``addq`` → ``add``), immediates in hex, and an indirect call
    through a register named after the symbol last loaded into it (``movabsq $expf, %rax; callq *%rax``). The
    CPython wrapper functions are left out."""
    raw: list[tuple[str, str, str, str]] = []  # (func, prefix, mnem, ops)
    labels: dict[str, int] = {}
    func = ""
    for line in text.splitlines():
        s = line.split("#", 1)[0].strip()
        if not s:
            continue
        if s.endswith(":") and " " not in s:
            name = s[:-1]
            if not name.startswith("."):
                func = name
            labels[name] = len(raw)
            continue
        if s.startswith("."):
            continue
        if func.startswith(_LLVM_WRAPPERS) or not func:
            continue
        parts = s.split(None, 1)
        prefix = ""
        if parts[0] in ("lock", "rep", "repz", "repnz", "notrack") and len(parts) > 1:
            prefix, parts = parts[0], parts[1].split(None, 1)
        mnem, ops = parts[0], (parts[1] if len(parts) > 1 else "")
        if mnem[-1:] in "bwlq" and mnem[:-1] in _INT_SUFFIXED:
            mnem = mnem[:-1]
        raw.append((func, prefix, mnem, _norm_ops(mnem, ops)))
    out: list[Insn] = []
    loaded: dict[str, str] = {}
    for a, (fn, prefix, mnem, ops) in enumerate(raw):
        if mnem.startswith("j") and ops in labels:
            ops = f"{labels[ops]:x} <{ops}>"
        elif mnem == "movabs":
            m = re.match(r"\$([A-Za-z_.][\w.@]*),%(\w+)$", ops)
            if m:
                loaded[m.group(2)] = m.group(1)
        elif mnem == "call":
            m = re.match(r"\*%(\w+)$", ops)
            if m and m.group(1) in loaded:
                ops = f"<{loaded[m.group(1)]}>"
            elif re.match(r"[A-Za-z_][\w.@]*$", ops):
                ops = f"<{ops}>"
        out.append(Insn(a, mnem, ops, prefix, fn))
    return out

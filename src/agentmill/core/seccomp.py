"""A seccomp-bpf filter that a sandbox child installs on itself before untrusted code runs.

Why: the sandbox's Python layers (AST policy, audit hook) can be bypassed by code that reaches interpreter
internals, so the kernel must refuse what untrusted code never needs: new processes (fork, vfork, a ``clone``
without ``CLONE_THREAD``, ``clone3``), ``execve``, sockets, debugging another process (``ptrace``,
``process_vm_*``), new namespaces, and a few kernel interfaces with a history of escapes (bpf, userfaultfd,
perf_event_open, the key store, io_uring). A seccomp filter cannot be removed once installed, is inherited by every
thread, and works the same with or without bubblewrap around the child.

The filter is classic BPF over ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4, ``args[i]`` at
16 + 8 i, little-endian on both supported machines). A denied call fails with ``EPERM`` (``clone3`` with
``ENOSYS``, so that glibc falls back to ``clone``, whose flags the filter can read); a call from another ABI
(x32 on x86_64, or a foreign ``arch``) kills the process. Syscall numbers and constants are from the Linux UAPI
headers (``asm/unistd_64.h`` for x86_64, ``asm-generic/unistd.h`` for aarch64, ``linux/audit.h``,
``linux/seccomp.h``, ``linux/filter.h``, ``linux/sched.h``).
"""

from __future__ import annotations

import platform
import struct

# linux/filter.h (classic BPF opcodes)
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K

# linux/seccomp.h
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
EPERM, ENOSYS = 1, 38

CLONE_THREAD = 0x00010000  # linux/sched.h
X32_SYSCALL_BIT = 0x40000000  # arch/x86/include/uapi/asm/unistd.h

OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16

DENIED = ("fork", "vfork", "execve", "execveat", "socket", "ptrace", "process_vm_readv", "process_vm_writev",
          "unshare", "setns", "bpf", "userfaultfd", "perf_event_open", "keyctl", "add_key", "request_key",
          "io_uring_setup")
"""Syscalls refused with EPERM (``fork``/``vfork`` exist on x86_64 only)."""

ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {  # AUDIT_ARCH_X86_64
        "clone": 56, "clone3": 435, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "socket": 41,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "unshare": 272, "setns": 308,
        "bpf": 321, "userfaultfd": 323, "perf_event_open": 298, "keyctl": 250, "add_key": 248,
        "request_key": 249, "io_uring_setup": 425}),
    "aarch64": (0xC00000B7, {  # AUDIT_ARCH_AARCH64
        "clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "socket": 198, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "unshare": 97, "setns": 268, "bpf": 280,
        "userfaultfd": 282, "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218,
        "io_uring_setup": 425}),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)  # struct sock_filter; both supported machines are little-endian


def deny_filter(machine: str | None = None) -> bytes | None:
    """The filter program (concatenated ``struct sock_filter``) for ``machine`` (default: this one), or None on a
    machine this module has no syscall table for."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        return None
    arch, nr = ARCHES[machine]
    prog = [_insn(LD_W_ABS, OFFSET_ARCH), _insn(JEQ_K, arch, jt=1), _insn(RET_K, RET_KILL_PROCESS),
            _insn(LD_W_ABS, OFFSET_NR)]
    if machine == "x86_64":  # the x32 ABI reaches the same calls under other numbers
        prog += [_insn(JGE_K, X32_SYSCALL_BIT, jf=1), _insn(RET_K, RET_KILL_PROCESS)]
    prog += [_insn(JEQ_K, nr["clone3"], jf=1), _insn(RET_K, RET_ERRNO | ENOSYS)]
    for name in DENIED:
        if name in nr:
            prog += [_insn(JEQ_K, nr[name], jf=1), _insn(RET_K, RET_ERRNO | EPERM)]
    # clone: threads (CLONE_THREAD) are allowed, anything else makes a new process.
    prog += [_insn(JEQ_K, nr["clone"], jf=3), _insn(LD_W_ABS, OFFSET_ARG0), _insn(JSET_K, CLONE_THREAD, jt=1),
             _insn(RET_K, RET_ERRNO | EPERM), _insn(RET_K, RET_ALLOW)]
    return b"".join(prog)


CHILD_INSTALL = r'''
def install_seccomp(program_hex):
    """PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with SECCOMP_MODE_FILTER; returns True when the kernel took it."""
    import ctypes
    prog = bytes.fromhex(program_hex)
    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    fprog = SockFprog(len(prog) // 8, prog)
    return libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
'''
"""Child-side installer (run through ctypes before the audit hook bans ctypes)."""

__all__ = ["ARCHES", "CHILD_INSTALL", "DENIED", "deny_filter"]

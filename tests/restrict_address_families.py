"""Runs a command the way systemd's RestrictAddressFamilies= does: socket() of any address family
not named fails with EAFNOSUPPORT (a seccomp filter), then execs the command.

    python3 tests/restrict_address_families.py AF_UNIX AF_INET AF_INET6 -- CMD ARGS...

Linux on x86_64 or aarch64 only; exit 3 where the filter cannot be installed."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import struct
import sys

SOCKET_SYSCALL = {"x86_64": 41, "aarch64": 198}     # __NR_socket
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_W_ABS, BPF_JMP_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
NR_OFFSET, ARG0_OFFSET = 0, 16                       # struct seccomp_data: nr, arch, ip, args[6]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _program(syscall: int, allowed: list[int]) -> bytes:
    """BPF: socket(family not in allowed) -> EAFNOSUPPORT; everything else allowed."""
    ins = [(BPF_LD_W_ABS, 0, 0, NR_OFFSET),
           (BPF_JMP_JEQ_K, 0, len(allowed) + 2, syscall),      # not socket(): to the last ALLOW
           (BPF_LD_W_ABS, 0, 0, ARG0_OFFSET)]
    for i, family in enumerate(allowed):
        ins.append((BPF_JMP_JEQ_K, len(allowed) - i, 0, family))   # allowed: to the last ALLOW
    ins += [(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT), (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    return b"".join(struct.pack("=HBBI", *i) for i in ins)


def main(argv: list[str]) -> int:
    split = argv.index("--")
    families, command = argv[:split], argv[split + 1:]
    syscall = SOCKET_SYSCALL.get(platform.machine())
    if syscall is None or not sys.platform.startswith("linux"):
        print(f"no seccomp filter for {platform.machine()}", file=sys.stderr)
        return 3
    code = _program(syscall, [int(getattr(socket, name)) for name in families])
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
                                                                 ctypes.byref(prog), 0, 0):
        print(f"seccomp: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 3
    os.execvp(command[0], command)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

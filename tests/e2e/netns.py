"""A private network namespace for the calling thread, for the node tier.

Network namespaces belong to threads: after ``unshare(CLONE_NEWNET)`` the calling thread, the
sockets it opens and every process it starts live in a fresh namespace with only ``lo``, while
the rest of pytest stays on the host network. Leaving puts the thread back; the namespace itself
disappears with the last process in it (nothing is mounted under /run/netns).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import threading
from collections.abc import Iterator

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)} (the node tier needs root)")


def inode() -> int:
    """The calling thread's network namespace (to find processes left in it)."""
    return os.stat(f"/proc/self/task/{threading.get_native_id()}/ns/net").st_ino


@contextlib.contextmanager
def private_network() -> Iterator[int]:
    """Run the body in a new network namespace with ``lo`` up; yields its inode."""
    host = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    try:
        _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        try:
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
            yield inode()
        finally:
            _check(_libc.setns(host, _CLONE_NEWNET), "setns back to the host network")
    finally:
        os.close(host)

"""Compile and attach the run-queue wait program in a short-lived child, which hands the agent the map, program and
attachment fds over a unix socket (SCM_RIGHTS) and exits: bcc and its LLVM never load into the agent.

The attachments live as long as any process holds their fds, so the child exits with os._exit, skipping bcc's
atexit cleanup (which would detach the programs and disable the perf events the agent now shares).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from apis.core.objects import JSON
from koordlet.schedlat.btf import PTR, VMLINUX, Btf, BtfError
from koordlet.schedlat.program import text as program_text

log = logging.getLogger(__name__)

MAPS = ("tasks", "stats", "unknown", "placements")
_MAX_FDS = 32
_TIMEOUT = 120.0  # LLVM compiles the program in about a second; a loaded machine may take far longer


class BccUnavailable(Exception):
    """bcc cannot be imported or the program cannot be compiled or attached; the message says why."""


@dataclass
class Loaded:
    """What the child handed over: fds owned by the caller (close_all releases them, detaching the program)."""

    attach: str  # "raw_tracepoint" or "tracepoint"
    attach_reason: str
    maps: dict[str, int]
    progs: dict[str, int]  # event name -> program fd (its fdinfo has the run-time stats)
    links: list[int] = field(default_factory=list)  # raw tracepoint or perf event fds: the attachments

    def close_all(self) -> None:
        for fd in [*self.maps.values(), *self.progs.values(), *self.links]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.maps, self.progs, self.links = {}, {}, []


def load(raw: bool = True, *, timeout: float = _TIMEOUT) -> Loaded:
    """Run the child (this interpreter, `-m koordlet.schedlat.loader`) and receive the loaded program."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with parent:
        try:
            proc = subprocess.Popen([sys.executable, "-m", __name__, str(child.fileno()), "raw" if raw else "classic"],
                                    pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, close_fds=True)
        finally:
            child.close()
        parent.settimeout(timeout)
        try:
            msg, fds, _, _ = socket.recv_fds(parent, 1 << 16, _MAX_FDS)
        except (TimeoutError, OSError) as e:
            proc.kill()
            msg, fds = b"", []
            why = f"no answer in {timeout:.0f} s" if isinstance(e, TimeoutError) else str(e)
        else:
            why = ""
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if not msg:
        for fd in fds:
            os.close(fd)
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        if proc.returncode == -9 and not why:  # LLVM needs ~110 MiB for about a second: the usual killer
            why = "(SIGKILL: out of memory? the compile needs ~110 MiB beside the agent)"
        raise BccUnavailable(f"the program loader exited {proc.returncode} {why}".strip()
                             + (f": {' | '.join(tail)}" if tail else ""))
    head: JSON = json.loads(msg)
    if "error" in head:
        for fd in fds:
            os.close(fd)
        raise BccUnavailable(str(head["error"]))
    if err.strip():
        log.debug("program loader said: %s", err.decode(errors="replace").strip())
    return Loaded(str(head["attach"]), str(head["attach_reason"]),
                  {name: fds[i] for name, i in head["maps"].items()},
                  {name: fds[i] for name, i in head["progs"].items()},
                  [fds[i] for i in head["links"]])


# -- the child --------------------------------------------------------------------------------------------------
def raw_layout(path: str = VMLINUX) -> list[str]:
    """-D flags for the raw sched_switch program from the running kernel's BTF: where `task_struct.sched_info`'s
    `pcount` and `run_delay` are (CONFIG_SCHED_INFO), and that sched_switch hands over prev as a task pointer."""
    btf = Btf.load(path)
    info_off, _ = btf.member("task_struct", "sched_info")
    pcount_off, pcount_size = btf.member("sched_info", "pcount")
    delay_off, delay_size = btf.member("sched_info", "run_delay")
    if pcount_size != 8 or delay_size != 8:
        raise BtfError(f"sched_info.pcount/run_delay are {pcount_size}/{delay_size} bytes, not 8")
    params = btf.tracepoint_params("sched_switch")
    if len(params) < 3 or any(t is None or t.kind != PTR for _, t in params[1:3]):
        raise BtfError("sched_switch does not take (preempt, prev, next) task pointers")
    flags = [f"-DSI_PCOUNT_OFF={info_off + pcount_off}", f"-DSI_DELAY_OFF={info_off + delay_off}"]
    if delay_off == pcount_off + 8:
        flags.append("-DSI_ADJACENT")
    return flags


def _compile(raw: bool) -> tuple[Any, str, str]:
    """The attached bcc.BPF object, which program it is, and why."""
    try:
        import bcc  # the distribution's python3-bpfcc; see the Makefile and docs/decisions.md
    except Exception as e:  # ImportError, or a broken libbcc (OSError) in the module's own import
        raise BccUnavailable(f"the bcc Python module is not importable ({type(e).__name__}: {e}); install "
                             "python3-bpfcc") from e

    reason = "raw tracepoints not asked for"
    if raw:
        try:
            layout = raw_layout()
            bpf = bcc.BPF(text=program_text(True).encode(), cflags=layout)
            return bpf, "raw_tracepoint", " ".join(f.removeprefix("-D") for f in layout) + " from BTF"
        except BtfError as e:
            reason = f"no usable BTF ({e})"
        except Exception as e:  # the raw program did not compile or attach: the classic one may
            reason = f"the raw tracepoint program did not load ({type(e).__name__}: {e})"
    try:
        return bcc.BPF(text=program_text(False).encode()), "tracepoint", reason
    except Exception as e:  # compile error (headers), permission (EPERM), attach failure (no tracefs)
        raise BccUnavailable(f"the scheduler program did not load: {type(e).__name__}: {e}") from e


def _handover(bpf: Any, attach: str, reason: str) -> tuple[JSON, list[int]]:
    fds: list[int] = []

    def index(fd: int) -> int:
        fds.append(fd)
        return len(fds) - 1

    maps = {name: index(bpf[name.encode()].map_fd) for name in MAPS}
    progs = {}
    for name, fn in bpf.funcs.items():
        key = name.decode() if isinstance(name, bytes) else str(name)
        # tracepoint__sched__sched_switch or raw_tracepoint__sched_switch: the event's name
        progs[key.rpartition("__")[2]] = index(fn.fd)
    links = [index(fd) for fd in [*bpf.raw_tracepoint_fds.values(), *bpf.tracepoint_fds.values()]]
    return {"attach": attach, "attach_reason": reason, "maps": maps, "progs": progs, "links": links}, fds


def main(argv: list[str]) -> None:
    sock = socket.socket(fileno=int(argv[0]))
    try:
        bpf, attach, reason = _compile(argv[1] == "raw")
        head, fds = _handover(bpf, attach, reason)
    except Exception as e:
        head, fds = {"error": str(e) if isinstance(e, BccUnavailable) else f"{type(e).__name__}: {e}"}, []
    try:
        socket.send_fds(sock, [json.dumps(head).encode()], fds)
    finally:
        sys.stderr.flush()
        os._exit(0)  # not sys.exit: bcc's atexit cleanup would detach what the agent now holds


if __name__ == "__main__":
    main(sys.argv[1:])

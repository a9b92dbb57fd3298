"""The bcc backend: compiles and attaches the program once (raw tracepoints where BTF allows), then reads
per-pod totals from its maps each tick."""

from __future__ import annotations

import collections
import ctypes
import errno
import logging
import os
import platform
from typing import Any

import numpy as np

from koordlet.host.paths import HostPaths
from koordlet.schedlat.attribution import PodIndex, cgroup_path, looks_like_pod
from koordlet.schedlat.btf import INT, PTR, VMLINUX, Btf, BtfError
from koordlet.schedlat.hist import SLOTS, Totals
from koordlet.schedlat.program import MAX_SLOTS, SLOT_STATS_WORDS, text
from koordlet.states.model import PodMeta

log = logging.getLogger(__name__)

HOST_SLOT = 0
_BPF_ENABLE_STATS = 32  # bpf(2) command; stats stay on while the returned fd is open, for every program
_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}


class BccUnavailable(Exception):
    """bcc cannot be imported or the program cannot be compiled or attached; the message says why."""


def import_bcc() -> Any:
    try:
        import bcc  # the distribution's python3-bpfcc; see the Makefile and docs/decisions.md
    except Exception as e:  # ImportError, or a broken libbcc (OSError) in the module's own import
        raise BccUnavailable(f"the bcc Python module is not importable ({type(e).__name__}: {e}); install "
                             "python3-bpfcc") from e
    return bcc


def _enable_bpf_stats() -> int | None:
    """An fd that keeps kernel.bpf_stats_enabled on while open (BPF_ENABLE_STATS), or None where refused."""
    nr = _BPF_SYSCALL.get(platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 2)(0, 0)  # .enable_stats.type = BPF_STATS_RUN_TIME
    fd = int(libc.syscall(nr, _BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr)))
    return fd if fd >= 0 else None


def raw_layout(path: str = VMLINUX) -> list[str]:
    """-D flags for the raw tracepoint program from the running kernel's BTF: `task_struct.pid`'s offset, and
    whether sched_switch hands over prev_state (5.18+) or `task_struct.__state`'s offset to read it from."""
    btf = Btf.load(path)
    pid_off, pid_size = btf.member("task_struct", "pid")
    if pid_size != 4:
        raise BtfError(f"task_struct.pid is {pid_size} bytes")
    for event in ("sched_wakeup", "sched_wakeup_new", "sched_process_exit"):
        params = btf.tracepoint_params(event)  # sched_process_exit has a second one (group_dead) on 6.18
        if not params or params[0][1] is None or params[0][1].kind != PTR:
            raise BtfError(f"{event} does not take a task pointer first")
    params = btf.tracepoint_params("sched_switch")
    kinds = [None if t is None else t.kind for _, t in params]
    flags = [f"-DTASK_PID_OFF={pid_off}"]
    if kinds == [INT, PTR, PTR, INT]:
        flags.append("-DSWITCH_STATE_ARG")
    elif kinds == [INT, PTR, PTR]:
        state_off, state_size = btf.member("task_struct", "__state")
        if state_size != 4:
            raise BtfError(f"task_struct.__state is {state_size} bytes")
        flags.append(f"-DTASK_STATE_OFF={state_off}")
    else:
        raise BtfError(f"sched_switch has an unknown prototype ({len(params)} arguments)")
    return flags


class EbpfBackend:
    """`attach` says which program runs: "raw_tracepoint" (task_struct offsets from BTF) or "tracepoint" (the
    classic one, when BTF or the struct is missing or the raw program does not load; `attach_reason` says why)."""

    source = "ebpf"

    def __init__(self, paths: HostPaths, cgroup_version: int, *, raw: bool = True) -> None:
        bcc = import_bcc()
        self.paths = paths
        self.version = cgroup_version
        self.attach = "tracepoint"
        self.attach_reason = "raw tracepoints not asked for"
        self.bpf: Any = None
        self.layout: list[str] = []
        if raw:
            try:
                self.layout = raw_layout()
                self.bpf = bcc.BPF(text=text(True).encode(), cflags=self.layout)
                self.attach = "raw_tracepoint"
                self.attach_reason = " ".join(f.removeprefix("-D") for f in self.layout) + " from BTF"
            except BtfError as e:
                self.attach_reason = f"no usable BTF ({e})"
            except Exception as e:  # the raw program did not compile or attach: the classic one may
                self.attach_reason = f"the raw tracepoint program did not load ({type(e).__name__}: {e})"
        if self.bpf is None:
            try:
                self.bpf = bcc.BPF(text=text(False).encode())
            except Exception as e:  # compile error (headers), permission (EPERM), attach failure (no tracefs)
                raise BccUnavailable(f"the scheduler program did not load: {type(e).__name__}: {e}") from e
        log.info("run-queue wait program on %s (%s)", "raw tracepoints" if self.attach == "raw_tracepoint"
                 else "classic tracepoints", self.attach_reason)
        self._stats_fd = _enable_bpf_stats()
        self._tid_slot = self.bpf[b"tid_slot"]
        self._unknown = self.bpf[b"unknown"]
        self._stats = self.bpf[b"stats"]
        self._lookup_batch = bcc.libbcc.lib.bpf_lookup_batch
        self._slot_of: dict[str, int] = {}
        # Freed slots are reused last (FIFO), so a deleted pod's late samples do not land in a new pod at once.
        self._free = collections.deque(range(1, MAX_SLOTS))
        self._carry: dict[int, np.ndarray[Any, np.dtype[np.uint64]]] = {}  # user-space adds (waits placed late)
        self._pods: list[PodMeta] | None = None
        self._index = PodIndex(())
        self._high = 1  # slots in use are below this
        self._keys = (ctypes.c_uint32 * MAX_SLOTS)()
        self._values = np.zeros((MAX_SLOTS, SLOT_STATS_WORDS), dtype=np.uint64)
        self._closed = False
        self.full = False  # more pods than MAX_SLOTS - 1 at some point (the surplus is not measured)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.bpf.cleanup()
        if self._stats_fd is not None:
            os.close(self._stats_fd)
            self._stats_fd = None

    def program_stats(self) -> dict[str, tuple[int, int]]:
        """Per attached program: (run time ns, runs) from its fdinfo, where bpf stats are on."""
        out: dict[str, tuple[int, int]] = {}
        for name, fn in self.bpf.funcs.items():
            try:
                with open(f"/proc/self/fdinfo/{fn.fd}", encoding="ascii") as f:
                    info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
            except OSError:
                continue
            if "run_time_ns" in info:
                key = name.decode() if isinstance(name, bytes) else str(name)
                # tracepoint__sched__sched_switch or raw_tracepoint__sched_switch: the event's name
                out[key.rpartition("__")[2]] = (int(info["run_time_ns"]), int(info["run_cnt"]))
        return out

    # -- the tick ------------------------------------------------------------------------------------------
    def read(self, pods: list[PodMeta]) -> dict[str, Totals]:
        if pods is not self._pods:
            self._sync_slots(pods)
        self._place_unknown()
        rows = self._read_stats(self._high)
        out: dict[str, Totals] = {}
        for uid, slot in self._slot_of.items():
            row = rows[slot]
            carry = self._carry.get(slot)
            if carry is not None:
                row = row + carry
            values = row.tolist()
            out[uid] = Totals(values[1], values[0], tuple(values[2:]))
        return out

    def _sync_slots(self, pods: list[PodMeta]) -> None:
        """Slots for new pods; a gone pod's slot is emptied: its tasks placed again (so unplaced) and its sums
        zeroed before the slot can serve another pod."""
        self._pods = pods
        self._index = PodIndex(pods)
        live = {p.uid for p in pods}
        gone = [uid for uid in self._slot_of if uid not in live]
        if gone:
            freed = {self._slot_of.pop(uid) for uid in gone}
            stale = [k for k, v in self._tid_slot.items() if v.value in freed]
            for k in stale:
                self._tid_slot.pop(k, None)
            zero = self._stats.Leaf()
            for slot in freed:
                self._stats[ctypes.c_uint32(slot)] = zero
                self._carry.pop(slot, None)
                self._free.append(slot)
        for p in pods:
            if p.uid not in self._slot_of:
                if not self._free:
                    self.full = True
                    continue
                slot = self._free.popleft()
                self._slot_of[p.uid] = slot
                self._high = max(self._high, slot + 1)

    def _place_unknown(self) -> None:
        """Tasks the kernel saw run but user space has not placed: read each one's cgroup once and place it (pods'
        slot, or the host slot); its waits so far join that slot. A task in a kubepods cgroup of a pod not listed
        yet stays unplaced (its waits until then are dropped), so it is placed once the pod is listed."""
        entries = list(self._unknown.items_lookup_and_delete_batch())
        if not entries:
            return
        Key, Leaf = self._tid_slot.Key, self._tid_slot.Leaf
        for key, leaf in entries:
            tid = int(key if isinstance(key, int) else key.value)
            try:
                with open(self.paths.proc(str(tid), "cgroup"), encoding="utf-8", errors="replace") as f:
                    path = cgroup_path(f.read(), self.version)
            except OSError:
                continue  # exited before we looked: its waits cannot be placed
            if path is None:
                continue
            uid = self._index.pod_of(path)
            if uid is None and looks_like_pod(path):
                continue
            slot = HOST_SLOT if uid is None else self._slot_of.get(uid)
            if slot is None:
                continue
            self._tid_slot[Key(tid)] = Leaf(slot)
            values = np.array([leaf.sum, leaf.count, *leaf.hist], dtype=np.uint64)
            carry = self._carry.get(slot)
            self._carry[slot] = values if carry is None else carry + values

    def _read_stats(self, n: int) -> np.ndarray[Any, np.dtype[np.uint64]]:
        """Slots 0..n-1 of the stats array in one BPF_MAP_LOOKUP_BATCH."""
        count = ctypes.c_uint32(n)
        out_batch = ctypes.c_uint32(0)
        values = self._values
        res = self._lookup_batch(self._stats.map_fd, None, ctypes.byref(out_batch), self._keys,
                                 ctypes.c_void_p(values.ctypes.data), ctypes.byref(count))
        err = ctypes.get_errno()
        if res != 0 and err not in (0, errno.ENOENT):  # ENOENT: the end of the array was reached
            raise OSError(err, f"BPF_MAP_LOOKUP_BATCH on the stats map: {os.strerror(err)}")
        return values[: count.value]


assert SLOT_STATS_WORDS == 2 + SLOTS

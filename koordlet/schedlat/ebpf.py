"""The eBPF backend: the program is compiled and attached once by a short-lived child (loader.py), and its maps are
read by fd each tick (bpfsys.py); the agent never imports bcc."""

from __future__ import annotations

import ctypes
import logging
import os
import struct

import numpy as np
import numpy.typing as npt

from koordlet.host.paths import HostPaths
from koordlet.schedlat import bpfsys
from koordlet.schedlat.attribution import PodIndex, cgroup_path, looks_like_pod
from koordlet.schedlat.hist import SLOTS, Totals
from koordlet.schedlat.loader import BccUnavailable, Loaded, load
from koordlet.schedlat.program import MAX_SLOTS, SLOT_STATS_WORDS
from koordlet.schedlat.slots import SlotPool
from koordlet.states.model import PodMeta

__all__ = ["HOST_SLOT", "BccUnavailable", "EbpfBackend"]

log = logging.getLogger(__name__)

HOST_SLOT = 0
UNPLACED = 0xFFFFFFFF
_TASK = struct.Struct("=QQII")  # struct task_state {u64 seen; u64 delay; u32 slot; u32 tid;}
_U32 = struct.Struct("=I")


def _enable_bpf_stats() -> int | None:
    """An fd that keeps kernel.bpf_stats_enabled on while open (BPF_ENABLE_STATS), or None where refused."""
    try:
        return bpfsys.bpf(bpfsys.ENABLE_STATS, (ctypes.c_uint32 * 2)(0, 0))  # type = BPF_STATS_RUN_TIME
    except OSError:
        return None


class EbpfBackend:
    """`attach` says which program runs: "raw_tracepoint" (task_struct offsets from BTF) or "tracepoint" (the
    classic one, when BTF or the struct is missing or the raw program does not load; `attach_reason` says why)."""

    source = "ebpf"

    def __init__(self, paths: HostPaths, cgroup_version: int, *, raw: bool = True,
                 loaded: Loaded | None = None) -> None:
        self.paths = paths
        self.version = cgroup_version
        self.loaded = loaded if loaded is not None else load(raw)
        self.attach = self.loaded.attach
        self.attach_reason = self.loaded.attach_reason
        try:
            maps = self.loaded.maps
            self._tasks = bpfsys.BpfMap(maps["tasks"], "tasks")
            self._stats = bpfsys.BpfMap(maps["stats"], "stats")
            self._unknown = bpfsys.BpfMap(maps["unknown"], "unknown")
            self._placements = bpfsys.BpfMap(maps["placements"], "placements")
        except Exception as e:
            self.loaded.close_all()
            raise BccUnavailable(f"the loaded program's maps are not as expected: {e}") from e
        log.info("run-queue wait program on %s (%s)", "raw tracepoints" if self.attach == "raw_tracepoint"
                 else "classic tracepoints", self.attach_reason)
        self._stats_fd = _enable_bpf_stats()
        self._slot_of: dict[str, int] = {}
        self._slots = SlotPool(MAX_SLOTS)  # a freed slot waits before a new pod gets it; the lowest goes first
        self._carry: dict[int, npt.NDArray[np.uint64]] = {}  # user-space adds (waits placed late)
        self._rows: npt.NDArray[np.uint64] = np.zeros((0, 0), dtype=np.uint64)  # the last read's
        self._totals: dict[str, Totals] = {}  # the last read's, by pod uid
        self._pods: list[PodMeta] | None = None
        self._index = PodIndex(())
        ncpus = self._stats.ncpus
        self._keys = ctypes.create_string_buffer(4 * MAX_SLOTS)
        self._values = np.zeros((MAX_SLOTS, ncpus, SLOT_STATS_WORDS), dtype=np.uint64)
        self._zero_slot = bytes(self._stats.value_size)
        n_unknown = self._unknown.info.max_entries
        self._unknown_keys = ctypes.create_string_buffer(4 * n_unknown)
        self._unknown_values = np.zeros((n_unknown, SLOT_STATS_WORDS), dtype=np.uint64)
        self._closed = False
        self.full = False  # more pods than MAX_SLOTS - 1 at some point (the surplus is not measured)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for m in (self._tasks, self._stats, self._unknown, self._placements):
            m.close()
        self.loaded.close_all()  # the last references: the program detaches
        if self._stats_fd is not None:
            os.close(self._stats_fd)
            self._stats_fd = None

    def program_stats(self) -> dict[str, tuple[int, int]]:
        """Per attached program: (run time ns, runs) from its fdinfo, where bpf stats are on."""
        out: dict[str, tuple[int, int]] = {}
        for event, fd in self.loaded.progs.items():
            try:
                with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as f:
                    info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
            except OSError:
                continue
            if "run_time_ns" in info:
                out[event] = (int(info["run_time_ns"]), int(info["run_cnt"]))
        return out

    # -- the tick ------------------------------------------------------------------------------------------
    def read(self, pods: list[PodMeta]) -> dict[str, Totals]:
        if pods is not self._pods:
            self._sync_slots(pods)
        self._place_unknown()
        self._slots.read()
        rows = self._read_stats(self._slots.high)
        for slot, carry in self._carry.items():
            if slot < len(rows):
                rows[slot] += carry
        # most pods did not wait since the last read: their rows are unchanged and keep their Totals objects
        before, kept = self._rows, self._totals
        same = (rows == before).all(axis=1).tolist() if before.shape == rows.shape else [False] * len(rows)
        out: dict[str, Totals] = {}
        for uid, slot in self._slot_of.items():
            total = kept.get(uid) if slot < len(same) and same[slot] else None
            if total is None:
                values = rows[slot].tolist()
                total = Totals(values[1], values[0], tuple(values[2:]))
            out[uid] = total
        self._rows, self._totals = rows, out
        return out

    def placed(self) -> dict[int, int]:
        """tid -> slot of every task the program has placed (tests and debugging)."""
        out = {}
        for key in list(self._tasks.keys()):
            value = self._tasks.lookup(key)
            if value is not None:
                _, _, slot, tid = _TASK.unpack(value)
                if slot != UNPLACED:
                    out[tid] = slot
        for key in list(self._placements.keys()):  # placed, not yet picked up by the program
            value = self._placements.lookup(key)
            if value is not None:
                out.setdefault(_U32.unpack(key)[0], _U32.unpack(value)[0])
        return out

    def _sync_slots(self, pods: list[PodMeta]) -> None:
        """Slots for new pods; a gone pod's slot is emptied: its tasks unplaced (so placed again if they run) and
        its sums zeroed before the slot can serve another pod."""
        self._pods = pods
        self._index = PodIndex(pods)
        live = {p.uid for p in pods}
        gone = [uid for uid in self._slot_of if uid not in live]
        if gone:
            freed = {self._slot_of.pop(uid) for uid in gone}
            self._unplace(freed)
            for slot in freed:
                self._stats.update(_U32.pack(slot), self._zero_slot)
                self._carry.pop(slot, None)
                self._slots.free(slot)
        for p in pods:
            if p.uid not in self._slot_of:
                taken = self._slots.take()
                if taken is None:
                    self.full = True
                    continue
                self._stats.update(_U32.pack(taken), self._zero_slot)  # waits that came after it was freed
                self._slot_of[p.uid] = taken

    def _unplace(self, slots: set[int]) -> None:
        """Tasks of freed slots back to unplaced. This rewrites their entries, which the program may be updating
        at the same moment (then one wait of the task is lost or counted twice): they are a deleted pod's tasks,
        whose waits no longer count anywhere."""
        for key in list(self._placements.keys()):
            value = self._placements.lookup(key)
            if value is not None and _U32.unpack(value)[0] in slots:
                self._placements.delete(key)
        for key in list(self._tasks.keys()):
            value = self._tasks.lookup(key)
            if value is None:
                continue
            seen, delay, slot, tid = _TASK.unpack(value)
            if slot in slots:
                self._tasks.update(key, _TASK.pack(seen, delay, UNPLACED, tid), bpfsys.BPF_EXIST)

    def _place_unknown(self) -> None:
        """Tasks the kernel saw run but user space has not placed: read each one's cgroup once and place it (pods'
        slot, or the host slot); its waits so far join that slot. A task in a kubepods cgroup of a pod not listed
        yet stays unplaced (its waits until then are dropped), so it is placed once the pod is listed. The slot goes
        to `placements`, from which the program moves it into the task's entry at its next wait."""
        n = self._unknown.lookup_batch(self._unknown_keys, ctypes.c_void_p(self._unknown_values.ctypes.data),
                                       self._unknown.info.max_entries, delete=True)
        if not n:
            return
        tids = np.frombuffer(self._unknown_keys.raw, dtype=np.uint32, count=n)
        rows = self._unknown_values[:n]
        for tid, row in zip(tids.tolist(), rows, strict=True):
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
            try:
                self._placements.update(_U32.pack(tid), _U32.pack(slot))
            except OSError:  # refused (memory): the task stays unplaced, its waits come back through `unknown`
                continue
            values = row.copy()
            carry = self._carry.get(slot)
            self._carry[slot] = values if carry is None else carry + values

    def _read_stats(self, n: int) -> npt.NDArray[np.uint64]:
        """Slots 0..n-1 of the per-CPU stats array in one BPF_MAP_LOOKUP_BATCH, summed over CPUs."""
        got = self._stats.lookup_batch(self._keys, ctypes.c_void_p(self._values.ctypes.data), n)
        summed: npt.NDArray[np.uint64] = self._values[:got].sum(axis=1, dtype=np.uint64)
        return summed


assert SLOT_STATS_WORDS == 2 + SLOTS

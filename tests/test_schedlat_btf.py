"""The BTF reader behind the raw tracepoint program: a hand-built blob, and the running kernel's
/sys/kernel/btf/vmlinux (member by member against bpftool where installed, else known invariants)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from koordlet.schedlat import btf as B
from koordlet.schedlat.btf import Btf, BtfError
from koordlet.schedlat.loader import raw_layout

from conftest import require


class Blob:
    """Types appended in id order (from 1) and a string section, packed as the kernel lays BTF out."""

    def __init__(self) -> None:
        self.types = b""
        self.strings = b"\0"
        self.n = 0

    def s(self, name: str) -> int:
        if not name:
            return 0
        off = len(self.strings)
        self.strings += name.encode() + b"\0"
        return off

    def add(self, kind: int, name: str, size_or_type: int, vlen: int = 0, tail: bytes = b"",
            kind_flag: bool = False) -> int:
        info = (kind << 24) | vlen | (1 << 31 if kind_flag else 0)
        self.types += struct.pack("<3I", self.s(name), info, size_or_type) + tail
        self.n += 1
        return self.n

    def int_(self, name: str, size: int) -> int:
        return self.add(B.INT, name, size, tail=struct.pack("<I", size * 8))

    def struct_(self, kind: int, name: str, size: int, members: list[tuple[str, int, int]],
                kind_flag: bool = False) -> int:
        tail = b"".join(struct.pack("<3I", self.s(m), t, off) for m, t, off in members)
        return self.add(kind, name, size, len(members), tail, kind_flag)

    def proto(self, params: list[tuple[str, int]]) -> int:
        tail = b"".join(struct.pack("<2I", self.s(n), t) for n, t in params)
        return self.add(B.FUNC_PROTO, "", 0, len(params), tail)

    def tracepoint(self, event: str, params: list[tuple[str, int]]) -> None:
        void_ptr = self.add(B.PTR, "", 0)
        proto = self.proto([("__data", void_ptr), *params])
        self.add(B.TYPEDEF, f"btf_trace_{event}", self.add(B.PTR, "", proto))

    def bytes(self) -> bytes:
        hdr = struct.pack("<HBBI4I", B.MAGIC, 1, 0, 24, 0, len(self.types), len(self.types), len(self.strings))
        return hdr + self.types + self.strings


def _kernel_like(with_state_arg: bool = True, adjacent: bool = True) -> Blob:
    b = Blob()
    uint = b.int_("unsigned int", 4)
    pid_t = b.add(B.TYPEDEF, "pid_t", b.int_("int", 4))
    b.add(B.CONST, "", uint)
    b.add(B.ENUM, "e", 4, 2, struct.pack("<2I", b.s("A"), 0) + struct.pack("<2I", b.s("B"), 1))
    b.add(B.ARRAY, "", 0, tail=struct.pack("<3I", uint, uint, 16))
    b.add(B.ENUM64, "e64", 8, 1, struct.pack("<3I", b.s("C"), 1, 0))
    b.add(B.DECL_TAG, "tag", uint, tail=struct.pack("<I", 0xFFFFFFFF))
    b.add(B.FLOAT, "double", 8)
    state = b.struct_(B.UNION, "", 4, [("__state", uint, 0), ("other", uint, 0)])
    flags = b.struct_(B.STRUCT, "", 4, [("a", uint, (1 << 24) | 0), ("b", uint, (3 << 24) | 1)], kind_flag=True)
    ulong, ull = b.int_("long unsigned int", 8), b.int_("long long unsigned int", 8)
    info = b.struct_(B.STRUCT, "sched_info", 32, [("pcount", ulong, 0), ("run_delay", ull, 64 if adjacent else 128),
                                                  ("max_run_delay", ull, 128 if adjacent else 64)])
    b.struct_(B.STRUCT, "task_struct", 128, [("thread", uint, 0), ("", state, 64), ("", flags, 96),
                                            ("pid", pid_t, 256), ("tgid", pid_t, 288), ("sched_info", info, 512)])
    task = b.add(B.PTR, "", b.n)
    boolean = b.int_("_Bool", 1)
    b.tracepoint("sched_wakeup", [("p", task)])
    b.tracepoint("sched_wakeup_new", [("p", task)])
    b.tracepoint("sched_process_exit", [("p", task), ("group_dead", boolean)])
    cgrp = b.add(B.PTR, "", uint)  # the pointee's type does not matter: the program only passes the task on
    b.tracepoint("cgroup_attach_task", [("dst_cgrp", cgrp), ("path", cgrp), ("task", task), ("threadgroup", boolean)])
    switch = [("preempt", boolean), ("prev", task), ("next", task)]
    b.tracepoint("sched_switch", switch + ([("prev_state", uint)] if with_state_arg else []))
    b.add(B.VAR, "v", uint, tail=struct.pack("<I", 1))
    b.add(B.DATASEC, ".data", 4, 1, struct.pack("<3I", b.n, 0, 4))
    return b


def test_a_hand_built_blob_members_anonymous_unions_and_prototypes(tmp_path: Path) -> None:
    btf = Btf(_kernel_like().bytes())
    assert btf.member("task_struct", "pid") == (32, 4)
    assert btf.member("task_struct", "tgid") == (36, 4)
    assert btf.member("task_struct", "__state") == (8, 4)  # inside an anonymous union
    with pytest.raises(BtfError, match="bitfield"):
        btf.member("task_struct", "b")
    with pytest.raises(BtfError, match="no member"):
        btf.member("task_struct", "nope")
    with pytest.raises(BtfError, match="no struct"):
        btf.member("mm_struct", "pid")
    params = btf.tracepoint_params("sched_switch")
    assert [(t.kind, t.name) for _, t in params if t] == [(B.INT, "_Bool"), (B.PTR, ""), (B.PTR, ""),
                                                          (B.INT, "unsigned int")]
    path = tmp_path / "vmlinux"
    path.write_bytes(_kernel_like().bytes())
    assert raw_layout(str(path)) == ["-DSI_PCOUNT_OFF=64", "-DSI_DELAY_OFF=72", "-DSI_ADJACENT"]
    path.write_bytes(_kernel_like(with_state_arg=False, adjacent=False).bytes())  # two reads, any prototype era
    assert raw_layout(str(path)) == ["-DSI_PCOUNT_OFF=64", "-DSI_DELAY_OFF=80"]


def test_what_is_not_btf_or_lacks_the_struct_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BtfError, match="magic"):
        Btf(b"\x7fELF" + bytes(40))
    with pytest.raises(BtfError):
        Btf(_kernel_like().bytes()[:200])
    empty = Blob()
    empty.int_("int", 4)
    path = tmp_path / "vmlinux"
    path.write_bytes(empty.bytes())
    with pytest.raises(BtfError, match="no struct task_struct"):
        raw_layout(str(path))
    with pytest.raises(BtfError, match="No such file"):
        raw_layout(str(tmp_path / "absent"))


def test_the_running_kernels_btf_agrees_with_bpftool() -> None:
    require(os.path.exists(B.VMLINUX), f"{B.VMLINUX} is absent (a kernel without CONFIG_DEBUG_INFO_BTF)")
    btf = Btf.load()
    task = btf.find(B.STRUCT, "task_struct")
    pid, tgid = btf.member("task_struct", "pid"), btf.member("task_struct", "tgid")
    assert pid[1] == tgid[1] == 4 and tgid[0] == pid[0] + 4
    resolved = btf.resolve(task.members[[m.name for m in task.members].index("pid")].type_id)
    assert resolved is not None and resolved.kind == B.INT and resolved.int_bits == 32
    flags = raw_layout()
    info = btf.member("task_struct", "sched_info")[0]
    assert flags[0] == f"-DSI_PCOUNT_OFF={info + btf.member('sched_info', 'pcount')[0]}"
    bpftool = shutil.which("bpftool")
    if bpftool is None:
        return  # the invariants above are what can be checked
    out = subprocess.run([bpftool, "btf", "dump", "file", B.VMLINUX, "format", "raw"], capture_output=True,
                         text=True, check=True).stdout
    head = re.search(r"^\[(\d+)\] STRUCT 'task_struct' size=(\d+) vlen=(\d+)$", out, re.M)
    assert head is not None
    assert (int(head[1]), int(head[2]), int(head[3])) == (task.id, task.size_or_type, len(task.members))
    lines = out[head.end():].lstrip("\n").splitlines()[: len(task.members)]
    theirs = [re.fullmatch(r"\s+'([^']*)' type_id=(\d+) bits_offset=(\d+)(?: bitfield_size=(\d+))?", line)
              for line in lines]
    assert all(theirs)
    assert [(m[1], int(m[2]), int(m[3]), int(m[4] or 0)) for m in theirs if m] == [
        ("(anon)" if not x.name else x.name, x.type_id, x.bit_offset, x.bitfield_size) for x in task.members]
    proto = re.search(r"^\[\d+\] TYPEDEF 'btf_trace_sched_switch' type_id=(\d+)$", out, re.M)
    assert proto is not None and btf.types[int(proto[1])] is not None
    si = re.search(r"^\[\d+\] STRUCT 'sched_info' size=\d+ vlen=\d+\n((?:\s+'.*\n)+)", out, re.M)
    assert si is not None
    offsets = dict(re.findall(r"'(\w+)' type_id=\d+ bits_offset=(\d+)", si[1]))
    assert flags == [f"-DSI_PCOUNT_OFF={info + int(offsets['pcount']) // 8}",
                     f"-DSI_DELAY_OFF={info + int(offsets['run_delay']) // 8}",
                     *(["-DSI_ADJACENT"] if int(offsets["run_delay"]) == int(offsets["pcount"]) + 64 else [])]

"""A minimal reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`, format in the kernel's
Documentation/bpf/btf.rst): struct member offsets and tracepoint prototypes of the running kernel, for the raw
tracepoint program, whose `task_struct` reads must not take their layout from Debian's older headers."""

from __future__ import annotations

import struct
from dataclasses import dataclass

VMLINUX = "/sys/kernel/btf/vmlinux"
MAGIC = 0xEB9F

# Kinds (btf.rst "2.2 Type encoding").
INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT = range(1, 12)
FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(12, 20)

# Bytes that follow the 12-byte btf_type: fixed, or per vlen item.
_FIXED = {INT: 4, ARRAY: 12, VAR: 4, DECL_TAG: 4}
_PER_ITEM = {STRUCT: 12, UNION: 12, ENUM: 8, FUNC_PROTO: 8, DATASEC: 12, ENUM64: 12}
_MODIFIERS = (TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG)


class BtfError(Exception):
    """The blob is not BTF, or the type looked for is not in it."""


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    type_id: int
    bit_offset: int
    bitfield_size: int  # 0: not a bitfield


@dataclass(frozen=True, slots=True)
class Type:
    id: int
    kind: int
    name: str
    size_or_type: int  # size (INT, STRUCT, UNION, ENUM, FLOAT, DATASEC) or the referred type id
    kind_flag: bool
    members: tuple[Member, ...] = ()  # STRUCT/UNION members; FUNC_PROTO params (bit_offset 0)
    int_bits: int = 0  # INT: nr_bits


class Btf:
    """Every type of one BTF blob, by id (1..n; 0 is void) and STRUCT/TYPEDEF by name."""

    def __init__(self, data: bytes) -> None:
        if len(data) < 24:
            raise BtfError("shorter than a BTF header")
        magic, version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
        endian = "<"
        if magic != MAGIC:
            magic, version, _flags, hdr_len = struct.unpack_from(">HBBI", data, 0)
            endian = ">"
            if magic != MAGIC:
                raise BtfError(f"bad magic {data[:2].hex()}")
        if version != 1:
            raise BtfError(f"BTF version {version}")
        type_off, type_len, str_off, str_len = struct.unpack_from(endian + "4I", data, 8)
        strings = data[hdr_len + str_off: hdr_len + str_off + str_len]
        self._strings = strings
        self.types: list[Type | None] = [None]  # id 0: void
        self._by_name: dict[tuple[int, str], int] = {}
        u32 = struct.Struct(endian + "I")
        head = struct.Struct(endian + "3I")
        item = struct.Struct(endian + "3I")
        pair = struct.Struct(endian + "2I")
        pos, end = hdr_len + type_off, hdr_len + type_off + type_len
        if end > len(data) or hdr_len + str_off + str_len > len(data):
            raise BtfError("sections run past the end of the blob")
        while pos < end:
            name_off, info, size_or_type = head.unpack_from(data, pos)
            pos += 12
            kind = (info >> 24) & 0x1F
            vlen = info & 0xFFFF
            kind_flag = bool(info >> 31)
            tid = len(self.types)
            name = self._str(name_off) if name_off else ""
            members: tuple[Member, ...] = ()
            int_bits = 0
            if kind in (STRUCT, UNION):
                ms = []
                for i in range(vlen):
                    m_name, m_type, m_off = item.unpack_from(data, pos + 12 * i)
                    bits, size = (m_off & 0xFFFFFF, m_off >> 24) if kind_flag else (m_off, 0)
                    ms.append(Member(self._str(m_name), m_type, bits, size))
                members = tuple(ms)
            elif kind == FUNC_PROTO:
                members = tuple(Member(self._str(n), t, 0, 0)
                                for n, t in (pair.unpack_from(data, pos + 8 * i) for i in range(vlen)))
            elif kind == INT:
                int_bits = u32.unpack_from(data, pos)[0] & 0xFF
            elif kind not in _FIXED and kind not in _PER_ITEM and kind not in (PTR, FWD, FUNC, FLOAT, *_MODIFIERS):
                raise BtfError(f"unknown kind {kind} at type {tid}")
            pos += _FIXED.get(kind, 0) + _PER_ITEM.get(kind, 0) * vlen
            self.types.append(Type(tid, kind, name, size_or_type, kind_flag, members, int_bits))
            if name and kind in (STRUCT, UNION, TYPEDEF):
                self._by_name.setdefault((kind, name), tid)
        if pos != end:
            raise BtfError("the type section does not end on a type")

    @classmethod
    def load(cls, path: str = VMLINUX) -> Btf:
        try:
            with open(path, "rb") as f:
                return cls(f.read())
        except OSError as e:
            raise BtfError(f"{path}: {e.strerror}") from e

    def _str(self, off: int) -> str:
        end = self._strings.find(b"\0", off)
        return self._strings[off: end if end >= 0 else len(self._strings)].decode("utf-8", "replace")

    def find(self, kind: int, name: str) -> Type:
        tid = self._by_name.get((kind, name))
        if tid is None:
            raise BtfError(f"no {_KIND_NAMES.get(kind, kind)} {name} in BTF")
        t = self.types[tid]
        assert t is not None
        return t

    def resolve(self, tid: int) -> Type | None:
        """Through typedefs and qualifiers; None for void."""
        t = self.types[tid]
        while t is not None and t.kind in _MODIFIERS:
            t = self.types[t.size_or_type]
        return t

    def size_of(self, tid: int) -> int:
        t = self.resolve(tid)
        if t is None:
            raise BtfError("void has no size")
        if t.kind == PTR:
            return 8
        if t.kind == ARRAY:
            raise BtfError("array sizes are not needed here")
        return t.size_or_type

    def member(self, struct_name: str, member: str) -> tuple[int, int]:
        """(byte offset, byte size) of a named member of a struct, looking into anonymous struct/union members."""
        found = self._member(self.find(STRUCT, struct_name), member, 0)
        if found is None:
            raise BtfError(f"struct {struct_name} has no member {member}")
        bits, m = found
        if m.bitfield_size or bits % 8:
            raise BtfError(f"{struct_name}.{member} is a bitfield")
        return bits // 8, self.size_of(m.type_id)

    def _member(self, t: Type, name: str, base: int) -> tuple[int, Member] | None:
        for m in t.members:
            if m.name == name:
                return base + m.bit_offset, m
            if not m.name:
                inner = self.resolve(m.type_id)
                if inner is not None and inner.kind in (STRUCT, UNION):
                    found = self._member(inner, name, base + m.bit_offset)
                    if found is not None:
                        return found
        return None

    def tracepoint_params(self, event: str) -> list[tuple[str, Type | None]]:
        """A tracepoint's TP_PROTO as the raw tracepoint hands it over (ctx->args[i]): from the kernel's
        `btf_trace_<event>` typedef (pointer to a prototype whose first parameter is the `void *__data`)."""
        ptr = self.resolve(self.find(TYPEDEF, f"btf_trace_{event}").id)
        proto = None if ptr is None or ptr.kind != PTR else self.resolve(ptr.size_or_type)
        if proto is None or proto.kind != FUNC_PROTO or not proto.members:
            raise BtfError(f"btf_trace_{event} is not a pointer to a prototype")
        return [(p.name, self.resolve(p.type_id)) for p in proto.members[1:]]


_KIND_NAMES = {STRUCT: "struct", UNION: "union", TYPEDEF: "typedef"}

"""Every cgroup file koordlet reads or writes, per hierarchy version, with the value rules a write must pass."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from apis.core.errors import HostReadError, InvalidInput, UnsupportedKernel
from koordlet.host.paths import HostPaths

# Upstream: pkg/koordlet/util/system/cgroup_resource.go (the table), validator.go (value rules), cgroup2.go
# (v1 <-> v2 value conversions), resourceexecutor/updater.go (what the executor converts before a v2 write).

Kind = Literal[
    "int",  # one integer; "max" = unlimited where the range reaches INT64_MAX
    "cpuset",  # list format "0-3,8"
    "ids",  # one pid/tid per line (a write moves one id)
    "kv",  # "key value" lines (cpu.stat, memory.stat, cpuacct.stat)
    "psi",  # "some|full avg10=.. avg60=.. avg300=.. total=.."
    "numa-stat",  # per-NUMA-node lines "name[=total] N0=.. N1=.."
    "idle-page-stats",  # kidled age histogram (Anolis)
    "cpu-max",  # "<quota|max> <period>"
    "blkio",  # "MAJ:MIN value"
    "blkio-kv",  # "MAJ:MIN key=value ..."
]
# Where upstream looks for the file before writing it: "always" = assumed present; "dir" = in the target dir;
# "kubepods" = in the kubepods (Guaranteed QoS) dir, checked once; "root" = at the hierarchy root.
Probe = Literal["always", "dir", "kubepods", "root"]
Validator = Callable[[str], str | None]

INT64_MAX = 2**63 - 1
CGROUP_MAX = "max"
CFS_BASE_PERIOD_US = 100_000
CFS_QUOTA_MIN_US = 1_000  # the smallest quota except -1
CFS_PERIOD_MIN_US, CFS_PERIOD_MAX_US = 1_000, 1_000_000  # kernel: the period must be within [1 ms, 1 s]
CPU_SHARES_MIN, CPU_SHARES_MAX = 2, 262_144
CPU_WEIGHT_MIN, CPU_WEIGHT_MAX = 1, 10_000
CPUSET_MAX_ID = 4096  # upstream pkg/util/cpuset maxAvailableCPUCount
PID_MAX_LIMIT = 4_194_304  # kernel PID_MAX_LIMIT on 64-bit

_INT = re.compile(r"[+-]?[0-9]+")  # Go strconv.ParseInt(s, 10, 64): a sign and ASCII digits, nothing else
_CPUSET = re.compile(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*")
_DEVICE = re.compile(r"[0-9]+:[0-9]+")


def _int64(text: str, allow_max: bool) -> int | None:
    if allow_max and text == CGROUP_MAX:
        return INT64_MAX
    if not _INT.fullmatch(text):
        return None
    v = int(text)
    return v if -INT64_MAX - 1 <= v <= INT64_MAX else None


def int_range(lo: int, hi: int, *, allow_max: bool = True) -> Validator:
    """Upstream RangeValidator: a decimal int64 in [lo, hi]; "max" reads as INT64_MAX (so it passes only when hi is
    INT64_MAX)."""

    def check(value: str) -> str | None:
        v = _int64(value, allow_max)
        if v is None:
            return f"{value!r} is not an integer"
        if not lo <= v <= hi:
            return f"{value} is not in [{lo}, {hi}]"
        return None

    return check


def _either(*alternatives: Validator) -> Validator:
    def check(value: str) -> str | None:
        errors = [alt(value) for alt in alternatives]
        return None if None in errors else " and ".join(e for e in errors if e)

    return check


def _literal(*allowed: str) -> Validator:
    def check(value: str) -> str | None:
        return None if value in allowed else f"{value!r} is not one of {', '.join(allowed)}"

    return check


# [quirk] upstream registers no validator for cpu.cfs_quota_us, cpu.cfs_period_us, memory.limit_in_bytes, tasks or
# cgroup.procs; we add the kernel's own bounds so the executor never writes a value the kernel would reject.
_QUOTA_LIMITED = int_range(CFS_QUOTA_MIN_US, INT64_MAX, allow_max=False)
_QUOTA_V1 = _either(_literal("-1"), _QUOTA_LIMITED)
_PERIOD = int_range(CFS_PERIOD_MIN_US, CFS_PERIOD_MAX_US, allow_max=False)
_MEMORY_LIMIT_V1 = _either(_literal("-1"), int_range(0, INT64_MAX, allow_max=False))  # v1 takes -1, never "max"
_ID = int_range(1, PID_MAX_LIMIT, allow_max=False)


def _cpu_max_rule(require_period: bool) -> Validator:
    """cpu.max as written for the v1 quota (period optional) or the v1 period.

    [quirk] upstream maps both cpu.cfs_quota_us and cpu.cfs_period_us to cpu.max and writes the bare v1 value; the
    kernel reads a lone number in cpu.max as the *quota*, so a bare period write changes the quota. We require the
    period file's v2 value to carry both fields (build it with `cpu_max`)."""

    def check(value: str) -> str | None:
        fields = value.split(" ")
        if len(fields) != 2 and (require_period or len(fields) != 1):
            return f"{value!r} is not '<quota|max> <period>'"
        if fields[0] != CGROUP_MAX and (err := _QUOTA_LIMITED(fields[0])):
            return f"quota: {err}"
        if len(fields) == 2 and (err := _PERIOD(fields[1])):
            return f"period: {err}"
        return None

    return check


def _cpuset(value: str) -> str | None:
    """Linux list format; empty is valid (upstream cpuset.Parse).

    [quirk] upstream parses "5-3" as an empty set and caps only range ends at 4096; the kernel rejects reversed
    ranges, so we do too, and we cap every id."""
    if value == "":
        return None
    if not _CPUSET.fullmatch(value):
        return f"{value!r} is not a cpu list"
    for part in value.split(","):
        first, _, last = part.partition("-")
        lo, hi = int(first), int(last or first)
        if lo > hi or hi > CPUSET_MAX_ID:
            return f"{part!r} is not a valid range (ids 0..{CPUSET_MAX_ID}, low-high)"
    return None


def _blkio(lo: int, hi: int) -> Validator:
    """`MAJ:MIN value` (throttle files, blkio.cost.weight).

    [quirk] upstream checks the number only when the string splits into exactly two fields, so "garbage" passes, and
    it accepts "max"; v1 blk-throttle takes only numbers, so we require the whole format and a plain integer."""
    number = int_range(lo, hi, allow_max=False)

    def check(value: str) -> str | None:
        device, _, rest = value.partition(" ")
        if not _DEVICE.fullmatch(device) or not rest:
            return f"{value!r} is not 'MAJ:MIN value'"
        return number(rest)

    return check


def _blkio_kv(rules: dict[str, Validator]) -> Validator:
    """`MAJ:MIN key=value ...` (blkio.cost.qos, blkio.cost.model) with a rule per allowed key.

    [quirk] upstream checks fixed slice offsets only when the field count is exactly 7 (qos) or 8 (model) and passes
    anything else unchecked; we check every key=value pair."""

    def check(value: str) -> str | None:
        device, *pairs = value.split(" ")
        if not _DEVICE.fullmatch(device) or not pairs:
            return f"{value!r} is not 'MAJ:MIN key=value ...'"
        for pair in pairs:
            key, eq, v = pair.partition("=")
            rule = rules.get(key)
            if not eq or rule is None:
                return f"{pair!r}: unknown key (allowed: {', '.join(rules)})"
            if err := rule(v):
                return f"{key}: {err}"
        return None

    return check


_NON_NEGATIVE = int_range(0, INT64_MAX, allow_max=False)
_POSITIVE = int_range(1, INT64_MAX, allow_max=False)
_IOCOST_QOS = _blkio_kv({
    "enable": _literal("0", "1"), "ctrl": _literal("user", "auto"),
    **dict.fromkeys(("rpct", "rlat", "wpct", "wlat", "min", "max"), _NON_NEGATIVE),
})
_IOCOST_MODEL = _blkio_kv({
    "ctrl": _literal("user", "auto"), "model": _literal("linear"),
    **dict.fromkeys(("rbps", "rseqiops", "rrandiops", "wbps", "wseqiops", "wrandiops"), _POSITIVE),
})


def _classid(value: str) -> str | None:
    """net_cls.classid: a u32 handle 0xAAAABBBB, written in hex (0x prefix) or decimal.

    [quirk] upstream parses the digits after "0x" as *decimal* (so "0xff" fails, "0x99999999" is its maximum) and
    parses decimals as int32 against a bound (41231686041) that int32 never reaches; we accept any u32."""
    if value.startswith("0x"):
        return None if re.fullmatch(r"[0-9a-fA-F]{1,8}", value[2:]) else f"{value!r} is not a 32-bit hex handle"
    return int_range(0, 2**32 - 1, allow_max=False)(value)


def _is_v2(version: int) -> bool:
    if version not in (1, 2):
        raise InvalidInput(f"cgroup version must be 1 or 2, not {version!r}")
    return version == 2


@dataclass(frozen=True, slots=True)
class CgroupResource:
    """One logical cgroup file (named by its v1 file, as upstream does) and where it lives in each hierarchy.

    `check`/`v2_check` validate the value in that version's own file format (a v2 write of cpu.shares is a weight:
    convert first with `shares_to_weight`, then validate with version=2)."""

    name: str
    v1_subsystem: str | None  # None: no v1 file
    v1_file: str | None
    v2_file: str | None  # None: no v2 file
    kind: Kind
    readonly: bool = False
    check: Validator | None = None
    v2_check: Validator | None = None  # None: same rule as v1
    v2_kind: Kind | None = None  # None: same format as v1
    probe: Probe = "always"
    v2_probe: Probe | None = None  # None: same as v1

    def __post_init__(self) -> None:
        if (self.v1_subsystem is None) != (self.v1_file is None):
            raise ValueError(f"{self.name}: v1 subsystem and file go together")

    def file(self, version: int) -> str | None:
        """The file name in this hierarchy version, or None when the version has no equivalent."""
        return self.v2_file if _is_v2(version) else self.v1_file

    def kind_in(self, version: int) -> Kind:
        return (self.v2_kind or self.kind) if _is_v2(version) else self.kind

    def probe_in(self, version: int) -> Probe:
        """Where upstream checks that the file exists before writing it."""
        return (self.v2_probe or self.probe) if _is_v2(version) else self.probe

    def rule(self, version: int) -> Validator | None:
        return (self.v2_check or self.check) if _is_v2(version) else self.check

    def validate(self, value: str, version: int = 1) -> str | None:
        """Why `value` must not be written to this file in `version`, or None when it may."""
        if self.file(version) is None:
            return f"{self.name} has no cgroup v{version} file"
        if self.readonly:
            return f"{self.name} is read-only"
        rule = self.rule(version)
        return rule(value) if rule else None


def _res(
    name: str,
    v1_subsystem: str | None,
    v2_file: str | None,
    kind: Kind,
    check: Validator | None = None,
    *,
    readonly: bool = False,
    v2_check: Validator | None = None,
    v2_kind: Kind | None = None,
    probe: Probe = "always",
    v2_probe: Probe | None = None,
) -> CgroupResource:
    v1_file = name if v1_subsystem else None  # upstream names every resource after its v1 file
    return CgroupResource(name, v1_subsystem, v1_file, v2_file, kind, readonly, check, v2_check, v2_kind, probe,
                          v2_probe)


def _ro(name: str, v1_subsystem: str | None, v2_file: str | None, kind: Kind, *, v2_kind: Kind | None = None,
        probe: Probe = "always") -> CgroupResource:
    return _res(name, v1_subsystem, v2_file, kind, readonly=True, v2_kind=v2_kind, probe=probe)


def _memory_qos(name: str, check: Validator, v2_probe: Probe = "dir") -> CgroupResource:
    """Memory-QoS files (Anolis on v1; min/low/high are standard on v2): the same name in both versions."""
    return _res(name, "memory", name, "int", check, probe="kubepods", v2_probe=v2_probe)


_TABLE = (
    # cpu
    _ro("cpu.stat", "cpu", "cpu.stat", "kv"),
    _res("cpu.shares", "cpu", "cpu.weight", "int", int_range(CPU_SHARES_MIN, CPU_SHARES_MAX),
         v2_check=int_range(CPU_WEIGHT_MIN, CPU_WEIGHT_MAX)),
    _res("cpu.cfs_quota_us", "cpu", "cpu.max", "int", _QUOTA_V1, v2_check=_cpu_max_rule(False), v2_kind="cpu-max"),
    _res("cpu.cfs_period_us", "cpu", "cpu.max", "int", _PERIOD, v2_check=_cpu_max_rule(True), v2_kind="cpu-max"),
    # [quirk] the burst ceiling differs by version: v1 [0, 1e8] us, v2 cpu.max.burst [0, INT64_MAX].
    _res("cpu.cfs_burst_us", "cpu", "cpu.max.burst", "int", int_range(0, 100_000_000, allow_max=False),
         v2_check=int_range(0, INT64_MAX), probe="dir", v2_probe="kubepods"),
    _res("cpu.bvt_warp_ns", "cpu", "cpu.bvt_warp_ns", "int", int_range(-1, 2), probe="dir"),
    _res("cpu.idle", "cpu", "cpu.idle", "int", int_range(0, 1), probe="kubepods"),
    # v2 moves a single thread only inside a threaded subtree (Documentation/admin-guide/cgroup-v2.rst).
    _res("tasks", "cpu", "cgroup.threads", "ids", _ID),
    _res("cgroup.procs", "cpu", "cgroup.procs", "ids", _ID),
    # cpuset
    _res("cpuset.cpus", "cpuset", "cpuset.cpus", "cpuset", _cpuset),
    _ro("cpuset.cpus.effective", None, "cpuset.cpus.effective", "cpuset"),  # upstream reads v2 cpusets here
    _res("cpuset.mems", "cpuset", "cpuset.mems", "cpuset", _cpuset),  # not in upstream's table
    # cpuacct (v1 PSI lives here too, on kernels that have it, e.g. Anolis)
    _ro("cpuacct.stat", "cpuacct", "cpu.stat", "kv"),
    _ro("cpuacct.usage", "cpuacct", "cpu.stat", "int", v2_kind="kv"),  # v1 ns; v2 usage_usec
    _ro("cpu.pressure", "cpuacct", "cpu.pressure", "psi", probe="kubepods"),
    _ro("memory.pressure", "cpuacct", "memory.pressure", "psi", probe="kubepods"),
    _ro("io.pressure", "cpuacct", "io.pressure", "psi", probe="kubepods"),
    # memory
    _res("memory.limit_in_bytes", "memory", "memory.max", "int", _MEMORY_LIMIT_V1, v2_check=int_range(0, INT64_MAX)),
    _ro("memory.usage_in_bytes", "memory", "memory.current", "int"),
    _ro("memory.stat", "memory", "memory.stat", "kv"),
    _ro("memory.numa_stat", "memory", "memory.numa_stat", "numa-stat"),  # v1 pages, v2 bytes
    _memory_qos("memory.wmark_ratio", int_range(0, 100)),
    _memory_qos("memory.wmark_scale_factor", int_range(1, 1000)),
    _memory_qos("memory.wmark_min_adj", int_range(-25, 50)),
    _memory_qos("memory.min", int_range(0, INT64_MAX), v2_probe="always"),
    _memory_qos("memory.low", int_range(0, INT64_MAX), v2_probe="always"),
    _memory_qos("memory.high", int_range(0, INT64_MAX), v2_probe="always"),
    _memory_qos("memory.priority", int_range(0, 12)),
    _memory_qos("memory.use_priority_oom", int_range(0, 1)),
    _memory_qos("memory.oom.group", int_range(0, 1)),
    _ro("memory.idle_page_stats", "memory", None, "idle-page-stats", probe="kubepods"),
    # blkio: v1 only (upstream: "TODO: register BlkioIOWeight, BlkioIOQoS and BlkioIOModel" for v2)
    _res("blkio.throttle.read_iops_device", "blkio", None, "blkio", _blkio(0, INT64_MAX), probe="kubepods"),
    _res("blkio.throttle.read_bps_device", "blkio", None, "blkio", _blkio(0, INT64_MAX), probe="kubepods"),
    _res("blkio.throttle.write_iops_device", "blkio", None, "blkio", _blkio(0, INT64_MAX), probe="kubepods"),
    _res("blkio.throttle.write_bps_device", "blkio", None, "blkio", _blkio(0, INT64_MAX), probe="kubepods"),
    _res("blkio.cost.weight", "blkio", None, "blkio", _blkio(1, 100), probe="kubepods"),
    _res("blkio.cost.qos", "blkio", None, "blkio-kv", _IOCOST_QOS, probe="root"),
    _res("blkio.cost.model", "blkio", None, "blkio-kv", _IOCOST_MODEL, probe="root"),
    # [quirk] upstream also lists the v1 net_cls.classid object in its v2 table, which resolves to
    # <root>/net_cls/<dir>/net_cls.classid on a v2 host (net_cls has no v2 controller); we record it as v1-only.
    _res("net_cls.classid", "net_cls", None, "int", _classid, probe="kubepods"),
)

RESOURCES: dict[str, CgroupResource] = {r.name: r for r in _TABLE}


def _lookup(resource: str | CgroupResource) -> CgroupResource:
    if isinstance(resource, CgroupResource):
        return resource
    try:
        return RESOURCES[resource]
    except KeyError:
        raise InvalidInput(f"unknown cgroup resource {resource!r}") from None


def resource_path(version: int, paths: HostPaths, resource: str | CgroupResource, rel_dir: str) -> str:
    """v1: <cgroup_root>/<subsystem>/<rel_dir>/<v1 file>; v2: <cgroup_root>/<rel_dir>/<v2 file>.

    Raises UnsupportedKernel when the resource has no file in `version`, InvalidInput for an unknown resource or a
    `rel_dir` that climbs out with "..". A leading "/" in `rel_dir` is ignored (upstream joins with filepath.Join)."""
    res = _lookup(resource)
    name = res.file(version)
    if name is None:
        raise UnsupportedKernel(f"{res.name} has no cgroup v{version} file")
    rel = rel_dir.lstrip("/")
    if ".." in rel.split("/"):
        raise InvalidInput(f"cgroup dir {rel_dir!r} leaves the hierarchy")
    if version == 1:
        assert res.v1_subsystem is not None  # __post_init__ pairs it with v1_file
        return os.path.join(paths.cgroup_root, res.v1_subsystem, rel, name)
    return os.path.join(paths.cgroup_root, rel, name)


def resource_supported(version: int, paths: HostPaths, resource: str | CgroupResource, rel_dir: str = "") -> bool:
    """Whether the resource's file exists under `rel_dir` (pass the dir its `probe_in(version)` names)."""
    try:
        return os.path.exists(resource_path(version, paths, resource, rel_dir))
    except UnsupportedKernel:
        return False


# cpu.shares <-> cpu.weight. [quirk] upstream cgroup2.go first used shares*100/1024 (1024 -> 100); it now uses the
# kubelet's mapping (KEP 2254: weight = 1 + (shares-2)*9999/262142, so 1024 -> 39), which we follow: kubelet writes
# cpu.weight this way, so reading it back stays consistent. Inputs outside the ranges raise, as upstream errors.


def shares_to_weight(shares: int) -> int:
    if not CPU_SHARES_MIN <= shares <= CPU_SHARES_MAX:
        raise InvalidInput(f"cpu.shares {shares} is not in [{CPU_SHARES_MIN}, {CPU_SHARES_MAX}]")
    return 1 + (shares - CPU_SHARES_MIN) * (CPU_WEIGHT_MAX - 1) // (CPU_SHARES_MAX - CPU_SHARES_MIN)


def weight_to_shares(weight: int) -> int:
    """The smallest cpu.shares that maps to `weight`.

    [quirk] upstream's inverse floors, (weight-1)*262142/9999 + 2, so weight 39 reads as 998 shares, which maps back
    to weight 38; we round up (39 -> 999 -> 39), so shares_to_weight(weight_to_shares(w)) == w for every weight."""
    if not CPU_WEIGHT_MIN <= weight <= CPU_WEIGHT_MAX:
        raise InvalidInput(f"cpu.weight {weight} is not in [{CPU_WEIGHT_MIN}, {CPU_WEIGHT_MAX}]")
    span = CPU_SHARES_MAX - CPU_SHARES_MIN
    return CPU_SHARES_MIN - (-(weight - 1) * span // (CPU_WEIGHT_MAX - 1))


def v1_memory_unlimited(text: str) -> bool:
    """Whether a v1 memory.limit_in_bytes content means unlimited: a -1 written there reads back as the page counter's
    maximum in bytes (9223372036854771712 with 4 KiB pages), never as -1."""
    text = text.strip()
    if text == "-1":
        return True
    if not (text.isascii() and text.isdigit()):
        return False
    page = os.sysconf("SC_PAGE_SIZE")
    return int(text) >= (INT64_MAX // page) * page


def cpu_max(quota_us: int, period_us: int) -> str:
    """The cpu.max line for a v1 quota and period; quota -1 (unlimited) becomes "max"."""
    if not CFS_PERIOD_MIN_US <= period_us <= CFS_PERIOD_MAX_US:
        raise InvalidInput(f"cfs period {period_us} is not in [{CFS_PERIOD_MIN_US}, {CFS_PERIOD_MAX_US}]")
    if quota_us == -1:
        return f"{CGROUP_MAX} {period_us}"
    if quota_us < CFS_QUOTA_MIN_US:
        raise InvalidInput(f"cfs quota {quota_us} is neither -1 nor >= {CFS_QUOTA_MIN_US}")
    return f"{quota_us} {period_us}"


def parse_cpu_max(text: str) -> tuple[int, int]:
    """(quota_us, period_us) from cpu.max content; "max" reads as -1. Raises HostReadError on anything else.

    [quirk] upstream parses the quota and period separately, so "100000 not_a_number" yields quota 100000; we parse
    both fields and reject it."""
    fields = text.split()
    if len(fields) != 2 or not all(f.isascii() and f.isdigit() for f in fields[1:]):
        raise HostReadError(f"cpu.max {text!r} is not '<quota|max> <period>'")
    quota, period = fields
    if quota == CGROUP_MAX:
        return -1, int(period)
    if not (quota.isascii() and quota.isdigit()):
        raise HostReadError(f"cpu.max quota {quota!r} is not a number")
    return int(quota), int(period)

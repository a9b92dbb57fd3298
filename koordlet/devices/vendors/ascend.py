"""Huawei Ascend NPUs for the device daemon: `npu-smi` output parsers and the XPUDeviceInfo entries built from them."""

# Upstream: pkg/device-daemon/resource/{npu.go,utils.go,const.go}. Every deviation is marked **[quirk]**.

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

from apis.core.objects import JSON
from apis.extension.resources import RESOURCE_GPU_MEMORY, RESOURCE_NPU_CORE, RESOURCE_NPU_CPU, RESOURCE_NPU_DVPP
from koordlet.devices.vendors import CommandError, Runner, VendorError, fields_after_colon, pci_placement, table_rows
from koordlet.host.paths import HostPaths

log = logging.getLogger(__name__)

VENDOR = "huawei"
PCI_VENDOR_ID = "19e5"
# Huawei's Hi171x BMC (iBMC VGA/management) functions share the vendor id but are not NPUs.
EXCLUDED_PRODUCTS = frozenset({"1710", "1711"})
NPU_SMI = "npu-smi"

# npu.go: models whose AI CPU count is fixed (npu-smi cpu-num-cfg is "not supported" there).
_AI_CPU_BY_MODEL = {"Ascend-910B": 0, "Ascend-910B2": 6, "Ascend-910B3": 7, "Ascend-910B4": 7}
_AI_CORE_310P3 = 8
# utils.go GetXPUMemory: what upstream reports when npu-smi answers "Command or option is not found" (310P3).
_MEMORY_310P3 = "21527Mi"
# `npu-smi info` Health column: OK, Warning (minor alarm), Alarm (major), Critical. A Warning NPU keeps serving
# (the Huawei doc sample shows Warning NPUs running processes), so only Alarm/Critical/unknown states are unhealthy.
HEALTHY_STATES = frozenset({"OK", "Warning"})
# `npu-smi info -t topo` cells that are PCIe/NUMA paths, not device-to-device links.
_NOT_P2P = frozenset({"X", "SYS", "PHB", "PIX", "PXB", "NODE", "NA", "-"})
_DAVINCI = re.compile(r"^davinci(\d+)$")
_NPU_LABEL = re.compile(r"^NPU(\d+)$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


def is_npu(vendor: str, device: str) -> bool:
    """utils.go IsNPUDevice: Huawei vendor id, except the BMC functions."""
    return vendor == PCI_VENDOR_ID and device not in EXCLUDED_PRODUCTS


@dataclass(frozen=True)
class ChipMapping:
    """One row of `npu-smi info -m`: an NPU (card) id, a chip on it, its logic id (None for the MCU) and name."""

    npu_id: int
    chip_id: int
    logic_id: int | None
    chip_name: str


@dataclass(frozen=True)
class NpuChip:
    """One NPU/chip pair of the `npu-smi info` summary table."""

    npu_id: int
    name: str
    health: str
    chip: int
    device: int | None  # the second id in the chip cell (`Device` logic id on 310/310P, `Phy-ID` on Atlas A3)
    bus_id: str


@dataclass(frozen=True)
class Board:
    bus_id: str
    chip_faults: int


@dataclass(frozen=True)
class ChipHealth:
    status: str
    error_code: str
    error_info: str


def parse_mapping(text: str) -> list[ChipMapping]:
    """`npu-smi info -m`: whitespace-separated rows under the `NPU ID  Chip ID  Chip Logic ID  Chip Name` header
    (leading tabs in some versions); the MCU row has logic id `-`."""
    rows = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 4 or not (f[0].isdigit() and f[1].isdigit()):
            continue
        rows.append(ChipMapping(int(f[0]), int(f[1]), int(f[2]) if f[2].isdigit() else None, " ".join(f[3:])))
    return rows


def model_from_mapping(text: str) -> str:
    """The product name: the first NPU chip's name with spaces as dashes (`Ascend 910A` -> `Ascend-910A`).

    **[quirk]** upstream joins the last two fields of output line 2, which equals this for `Ascend <model>` names
    but yields e.g. `0-MiniD` for old Ascend 310 tools that print a one-word name.
    """
    for row in parse_mapping(text):
        if row.logic_id is not None:
            return "-".join(row.chip_name.split())
    raise VendorError("npu-smi info -m lists no NPU chip")


def parse_card_ids(text: str) -> list[str]:
    """`npu-smi info -l`: the last field of every `NPU ID : <n>` line (utils.go GetXPUCards)."""
    return [line.split()[-1] for line in text.splitlines() if "NPU ID" in line and line.split()]


def parse_capacity_mib(text: str) -> int | None:
    """Sum of every `DDR Capacity(MB)` / `HBM Capacity(MB)` value (utils.go GetXPUMemory); None without such lines."""
    total: int | None = None
    for line in text.splitlines():
        if "DDR Capacity" in line or "HBM Capacity" in line:
            try:
                total = (total or 0) + int(line.split()[-1])
            except ValueError as e:
                raise VendorError(f"unparsable capacity line {line.strip()!r}") from e
    return total


def parse_aicore(text: str) -> int:
    """Sum of `Aicore Count` values of `npu-smi info -t common` (utils.go GetAiCore)."""
    return _sum_last_fields(text, "Aicore Count")


def parse_aicpu(text: str) -> int:
    """Sum of the values of lines mentioning `AI` in `npu-smi info -t cpu-num-cfg` (utils.go GetAiCpu)."""
    return _sum_last_fields(text, "AI")


def _sum_last_fields(text: str, needle: str) -> int:
    total = 0
    for line in text.splitlines():
        if needle in line:
            try:
                total += int(line.split()[-1])
            except ValueError as e:
                raise VendorError(f"unparsable {needle!r} line {line.strip()!r}") from e
    return total


def parse_board(text: str) -> Board:
    """`npu-smi info -t board -i <card>`: `PCIe Bus Info` and the `Chip Fault` count (utils.go GetDeviceInfo)."""
    bus, faults = "", 0
    for line in text.splitlines():
        if "PCIe Bus Info" in line:
            bus = line.split()[-1]
        elif "Chip Fault" in line:
            try:
                faults = int(line.split()[-1])
            except ValueError:
                faults = 0  # upstream ignores the Atoi error
    return Board(bus, faults)


def parse_health(text: str) -> ChipHealth:
    """`npu-smi info -t health -i <card> -c <chip>`; `NA` means empty. Error Information may continue on
    `: <text>` lines with an empty key; they are joined with "; "."""
    status = code = ""
    info: list[str] = []
    in_info = False
    for line in text.splitlines():
        key = line.split(":", 1)[0].strip()
        value = fields_after_colon(line)
        if key == "Health Status":
            status, in_info = value, False
        elif key == "Error Code":
            code, in_info = value, False
        elif key == "Error Information":
            info, in_info = [value], True
        elif in_info and not key and value:
            info.append(value)
    info = [v for v in info if v and v != "NA"]
    return ChipHealth(status, "" if code == "NA" else code, "; ".join(info))


def parse_info_table(text: str) -> list[NpuChip]:
    """The `npu-smi info` summary: per NPU/chip a name line (`| 0  910B1 | OK | ...`) and a chip line
    (`| 0  [device] | 0000:C1:00.0 | ...`). Stops at the process table; tolerates author elisions (`...`),
    Markdown indentation and Atlas A3's unmarked die separators."""
    out: list[NpuChip] = []
    pending: tuple[int, str, str] | None = None
    for cells, head in table_rows(text, stop=("Process id", "Process name")):
        if len(head) == 2 and head[0].isdigit() and cells[1].isalpha():
            pending = (int(head[0]), head[1], cells[1])
        elif pending and 1 <= len(head) <= 2 and all(h.isdigit() for h in head) and _BUS_ID.match(cells[1]):
            npu_id, name, health = pending
            device = int(head[1]) if len(head) == 2 else None
            out.append(NpuChip(npu_id, name, health, int(head[0]), device, cells[1]))
            pending = None
    return out


def parse_topology(text: str) -> dict[int, dict[int, str]]:
    """`npu-smi info -t topo`: the link matrix as {row NPU: {column NPU: link}} (`X` on the diagonal)."""
    cols: list[int] = []
    out: dict[int, dict[int, str]] = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens or _npu_index(tokens[0]) is None:
            continue
        if not cols:
            lead = []
            for t in tokens:
                index = _npu_index(t)
                if index is None:
                    break
                lead.append(index)
            rest = tokens[len(lead):]
            if not rest or rest[0] == "CPU":  # the header: NPU0 NPU1 ... [CPU Affinity]
                cols = lead
            continue
        row = _npu_index(tokens[0])
        cells = tokens[1:1 + len(cols)]
        if row is not None and len(cells) == len(cols):
            out[row] = dict(zip(cols, cells, strict=True))
    return out


def _npu_index(token: str) -> int | None:
    m = _NPU_LABEL.match(token)
    return int(m.group(1)) if m else None


def p2p_links(topology: dict[int, dict[int, str]], minor: int) -> list[dict[str, str]]:
    """XPUDeviceInfo.topology.p2pLinks of one NPU: its peers grouped by link type (HCCS, ...), PCIe paths
    excluded; `NPU<k>` of the matrix is taken to be the chip logic id, i.e. /dev/davinci<k>."""
    peers: dict[str, list[int]] = {}
    for peer, link in sorted((topology.get(minor) or {}).items()):
        if peer != minor and link not in _NOT_P2P:
            peers.setdefault(link, []).append(peer)
    return [{"peerMinor": ",".join(map(str, p)), "type": t} for t, p in peers.items()]


def davinci_minors(dev_root: str) -> list[str]:
    """The N of every `/dev/davinci<N>` (not davinci_manager), in numeric order.

    **[quirk]** upstream sorts them as strings (davinci10 before davinci2), which pairs the wrong minor with a
    card on hosts with more than ten NPUs.
    """
    try:
        names = os.listdir(dev_root)
    except OSError:
        return []
    found = [m.group(1) for m in map(_DAVINCI.match, names) if m]
    return sorted(found, key=int)


def collect(run: Runner, paths: HostPaths, dev_root: str) -> list[JSON]:
    """XPUDeviceInfo entries (plain dicts) for every NPU card, as upstream's npu manager builds them.

    Required: the model (`-m`) and the card ids (`-l`); without them VendorError. **[quirk]** upstream also fails
    the whole vendor when the AI-core/AI-CPU/memory queries fail; we omit just that resource (logged), because
    npu-smi answers `cpu-num-cfg` only on some models and dropping every NPU over one resource hides them all.
    Additions to upstream (which leaves a TODO there): p2pLinks from `npu-smi info -t topo`, and health from the
    summary table / `-t health` besides board `Chip Fault`.
    """
    model = model_from_mapping(run([NPU_SMI, "info", "-m"]))
    cards = parse_card_ids(run([NPU_SMI, "info", "-l"]))
    if not cards:
        raise VendorError("npu-smi info -l lists no NPU ID")
    minors = davinci_minors(dev_root)
    if not minors:
        raise VendorError(f"npu-smi lists NPU cards but there is no davinci<N> device in {dev_root}")
    if len(minors) != len(cards):
        # upstream pairs cards[i] with minors[i] and panics when there are fewer minors than cards
        log.warning("npu-smi lists %d NPU cards but %s has %d davinci devices; pairing the first %d",
                    len(cards), dev_root, len(minors), min(len(cards), len(minors)))
    resources: dict[str, str] = {}
    memory = _memory(run, cards[0])
    if memory:
        resources[RESOURCE_GPU_MEMORY] = memory
    cpu = _ai_cpu(run, model, cards[0])
    if cpu is not None:
        resources[RESOURCE_NPU_CPU] = str(cpu)
    core = _ai_core(run, model, cards[0])
    if core is not None:
        resources[RESOURCE_NPU_CORE] = str(core)
    resources[RESOURCE_NPU_DVPP] = "100"
    topology = _topology(run, model)
    summary = _summary(run)

    out: list[JSON] = []
    for card, minor in zip(cards, minors, strict=False):
        try:
            board = parse_board(run([NPU_SMI, "info", "-t", "board", "-i", card]))
        except CommandError as e:
            log.warning("skipping NPU card %s: %s", card, e)  # upstream: `continue`
            continue
        chip = summary.get(_int(card))
        bus, node, pcie = pci_placement(paths, board.bus_id or (chip.bus_id if chip else ""))
        topo: JSON = {}
        links = p2p_links(topology, int(minor))
        if links:
            topo["p2pLinks"] = links
        topo.update({"socketID": "-1", "nodeID": node, "pcieID": pcie, "busID": bus})
        out.append({"vendor": VENDOR, "model": model, "uuid": f"npu-{card}-{minor}", "minor": minor,
                    "resources": dict(resources), "topology": topo, "status": _status(run, card, board, chip)})
    return out


def _int(text: str) -> int:
    return int(text) if text.isdigit() else -1


def _memory(run: Runner, card: str) -> str:
    """`<n>Mi` from `-t memory` (upstream's query), else from `-t usages`, which prints the same capacity lines.

    **[quirk]** upstream runs `npu-smi -t memory -i 1` (no `info` subcommand, card 1 whatever the cards are) and
    falls back to a fixed 21527Mi when the output says "Command or option is not found" (310P3); we query the
    first card with the subcommand, and keep that constant only when neither query yields a capacity.
    """
    not_found = False
    for kind in ("memory", "usages"):
        try:
            text = run([NPU_SMI, "info", "-t", kind, "-i", card])
        except CommandError as e:
            not_found = not_found or "Command or option is not found" in e.output
            continue
        try:
            mib = parse_capacity_mib(text)
        except VendorError as e:
            log.warning("npu-smi info -t %s: %s", kind, e)
            continue
        if mib is not None:
            return f"{mib}Mi"
    if not_found:
        return _MEMORY_310P3
    log.warning("NPU memory unknown: neither `npu-smi info -t memory` nor `-t usages` gave a capacity")
    return ""


def _ai_core(run: Runner, model: str, card: str) -> int | None:
    if model == "Ascend-310P3":
        return _AI_CORE_310P3
    try:
        # **[quirk]** upstream always asks card 0 (`-i 0`); we ask the first listed card
        return parse_aicore(run([NPU_SMI, "info", "-t", "common", "-i", card]))
    except (CommandError, VendorError) as e:
        log.warning("NPU AI core count unknown, %s omitted: %s", RESOURCE_NPU_CORE, e)
        return None


def _ai_cpu(run: Runner, model: str, card: str) -> int | None:
    if model in _AI_CPU_BY_MODEL:
        return _AI_CPU_BY_MODEL[model]
    try:
        return parse_aicpu(run([NPU_SMI, "info", "-t", "cpu-num-cfg", "-i", card]))
    except (CommandError, VendorError) as e:
        log.warning("NPU AI CPU count unknown, %s omitted: %s", RESOURCE_NPU_CPU, e)
        return None


def _topology(run: Runner, model: str) -> dict[int, dict[int, str]]:
    if model == "Ascend-310P3":
        return {}  # upstream: topo is not supported on 310P3
    try:
        text = run([NPU_SMI, "info", "-t", "topo"])
    except CommandError as e:
        log.info("no NPU topology (p2pLinks omitted): %s", e)
        return {}
    return {} if "not support" in text else parse_topology(text)


def _summary(run: Runner) -> dict[int, NpuChip]:
    """Chip 0 of every NPU in the `npu-smi info` summary (health state, bus id); {} when unavailable."""
    try:
        rows = parse_info_table(run([NPU_SMI, "info"]))
    except CommandError as e:
        log.info("npu-smi info summary unavailable: %s", e)
        return {}
    return {r.npu_id: r for r in rows if r.chip == 0}


def _status(run: Runner, card: str, board: Board, chip: NpuChip | None) -> JSON:
    if board.chip_faults > 0:  # upstream's only health signal
        return {"healthy": False, "errCode": "chip error",
                "errMessage": f"NPU index {card} has {board.chip_faults} chip faults"}
    if chip is not None and chip.health in HEALTHY_STATES:
        return {"healthy": True}
    try:
        detail = parse_health(run([NPU_SMI, "info", "-t", "health", "-i", card, "-c", "0"]))
    except CommandError as e:
        if chip is None:
            log.debug("NPU %s health unknown, reported healthy: %s", card, e)
            return {"healthy": True}
        detail = ChipHealth(chip.health, "", "")
    state = detail.status or (chip.health if chip else "")
    if not state or state in HEALTHY_STATES:
        return {"healthy": True}
    return {"healthy": False, "errCode": detail.error_code or state,
            "errMessage": detail.error_info or f"npu-smi reports health {state}"}

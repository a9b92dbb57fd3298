"""npu-smi parsers against every recorded Ascend output, and the Ascend probe's XPUDeviceInfo entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.devices.device_daemon import ReplayRunner
from koordlet.devices.vendors import CommandError, VendorError, ascend, pci_placement
from koordlet.host.paths import HostPaths

from conftest import CRD_DIR, require
from simpci import add_pci_device

FIXTURES = CRD_DIR.parent / "fixtures" / "vendor-outputs"
SMI = "npu-smi"


def fixture(name: str) -> str:
    require((FIXTURES / name).is_file(), f"recorded vendor output {name} not found")
    return (FIXTURES / name).read_text()


def section(capture: str, command: str) -> str:
    """The output of `command` in a mind-cluster fault-diag capture (command line, output, next command)."""
    lines = capture.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == command) + 1
    out = []
    for line in lines[start:]:
        if line.startswith(("/usr/", "lspci", "cat ", "pip ")):
            break
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


# --- summary table ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("npu-smi-info.910B1x8.trimmed.txt",
     [(0, "910B1", "OK", 0, None, "0000:C1:00.0"), (1, "910B1", "OK", 0, None, "0000:01:00.0"),
      (7, "910B1", "OK", 0, None, "0000:42:00.0")]),
    ("npu-smi-info.910B2Cx2.v23.0.3.paddle-doc.txt",
     [(0, "910B2C", "OK", 0, None, "0000:5A:00.0"), (1, "910B2C", "OK", 0, None, "0000:29:00.0")]),
    ("npu-smi-info.310P3-atlas300i-duo.nvtop-issue421.excerpt.txt",  # two chips share one bus id
     [(2, "310P3", "OK", 0, 0, "0000:01:00.0"), (2, "310P3", "OK", 1, 1, "0000:01:00.0")]),
    ("npu-smi-info.atlas800-3000.ascend310x4.v21.0.4.huawei-doc.txt",  # Chip and Device columns differ
     [(6, "310", "OK", c, c + 3, f"0000:{b}:00.0") for c, b in enumerate(["89", "8A", "8B", "8C"])]),
    ("npu-smi-info.atlas-a3-ascend910-dualdie.vllm-ascend-issue2035.excerpt.txt",  # unmarked die separator
     [(0, "Ascend910", "OK", 0, 0, "0000:9D:00.0"), (0, "Ascend910", "OK", 1, 1, "0000:9F:00.0")]),
    ("npu-smi-info.910-32GB-x8.mindcluster-doc.trimmed.txt",  # 8-space indentation, elisions, process table
     [(7, "xxx", "OK", 0, None, "0000:3D:00.0")]),
])
def test_summary_table_variants(name: str, expected: list[tuple[object, ...]]) -> None:
    rows = ascend.parse_info_table(fixture(name))
    assert [(r.npu_id, r.name, r.health, r.chip, r.device, r.bus_id) for r in rows] == expected


def test_summary_table_stops_at_process_table_and_keeps_warning_states() -> None:
    rows = ascend.parse_info_table(fixture("npu-smi-info.atlas800-9010.910x8-procs-warning.v24.1.RC2.huawei-doc.txt"))
    assert [r.npu_id for r in rows] == list(range(8))  # the process rows (`| 0  0 | 37656 |`) are not NPUs
    assert {r.npu_id: r.health for r in rows if r.health != "OK"} == {3: "Warning", 7: "Warning"}
    a910 = ascend.parse_info_table(fixture("npu-smi-info.atlas800-9010.910Ax8.v22.0.3.1.huawei-doc.txt"))
    assert [r.bus_id for r in a910] == [f"0000:{b}:00.0" for b in ("61", "DB", "B2", "3E", "60", "DA", "B1", "3D")]
    v20 = ascend.parse_info_table(fixture("npu-smi-info.atlas800-3000.ascend310x4.v20.2.0.huawei-doc.txt"))
    assert [(r.npu_id, r.chip, r.device) for r in v20] == [(215, c, c) for c in range(4)]
    assert ascend.parse_info_table(fixture("npu-smi-info.910B3x8.vllm-ascend-issue1903.excerpt.txt"))[2].bus_id \
        == "0000:C2:00.0"


# --- -m / -l / usages / common / board / health / topo ---------------------------------------------------------

def test_mapping_and_model() -> None:
    rows = ascend.parse_mapping(fixture("npu-smi-info-m.910Ax8.txt"))  # lines start with a TAB
    assert [(r.npu_id, r.chip_id, r.logic_id) for r in rows] == [(i, 0, i) for i in range(8)]
    assert ascend.model_from_mapping(fixture("npu-smi-info-m.910Ax8.txt")) == "Ascend-910A"
    assert ascend.model_from_mapping(fixture("npu-smi-info-m.atlas800-9010.910Ax8.v24.1.RC2.huawei-doc.txt")) \
        == "Ascend-910A"
    mcu = ascend.parse_mapping(fixture("npu-smi-info-m.atlas800-3000.ascend310x4-mcu.v21.0.4.huawei-doc.txt"))
    assert mcu[-1] == ascend.ChipMapping(6, 4, None, "Mcu")
    # quirk: one-word names stay whole (upstream joins the last two fields: "0-MiniD")
    assert ascend.model_from_mapping(fixture("npu-smi-info-m.atlas800-3000.ascend310x4.v20.2.0.huawei-doc.txt")) \
        == "MiniD"
    with pytest.raises(VendorError):
        ascend.model_from_mapping("NPU ID  Chip ID  Chip Logic ID  Chip Name\n")


def test_capacity_core_board_health() -> None:
    assert ascend.parse_capacity_mib(fixture("npu-smi-info-t-usages-i0.910B1.txt")) == 65536  # HBM 65536 + DDR 0
    assert ascend.parse_capacity_mib(fixture("npu-smi-info-i0-t-usages.910A.txt")) == 13553 + 31129
    assert ascend.parse_capacity_mib(fixture("npu-smi-info-i0-t-board.910A.txt")) is None
    assert ascend.parse_aicore(fixture("npu-smi-info-t-common-i1.910B1.txt")) == 24
    for name in ("npu-smi-info-i0-t-board.910A.txt", "npu-smi-info-i0-c0-t-board.910A.txt"):
        assert ascend.parse_board(fixture(name)) == ascend.Board("0000:61:00.0", 0)
    assert ascend.parse_board("\tPCIe Bus Info : 0000:C1:00.0\n\tChip Fault : 3\n") == ascend.Board("0000:C1:00.0", 3)
    assert ascend.parse_health(fixture("npu-smi-info-i0-c0-t-health.910A.ok.txt")) == ascend.ChipHealth("OK", "", "")
    after = fixture("mindcluster-faultdiag.npu_info_after.910Ax8-degraded.txt")
    degraded = ascend.parse_health(section(after, "/usr/local/bin/npu-smi info -i 0 -c 0 -t health"))
    assert degraded.status == "Alarm" and degraded.error_code == "A4025021 8C03A000 8C084E00"
    assert degraded.error_info.split("; ") == [
        "ascend_monitor adda heart beat lost error",
        "node type=process-manager, sensor type=General Software, event state=The process start failed or exit "
        "abnormally",
        "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost."]


def test_topology_matrix_and_links() -> None:
    topo = ascend.parse_topology(fixture("npu-smi-info-t-topo.910B1x8.txt"))
    assert sorted(topo) == list(range(8)) and topo[3][3] == "X" and topo[3][0] == "HCCS"
    assert ascend.p2p_links(topo, 3) == [{"peerMinor": "0,1,2,4,5,6,7", "type": "HCCS"}]
    assert ascend.p2p_links(topo, 9) == []
    # Constructed (not recorded): the same matrix with two HCCS groups of four and PCIe paths between them.
    lines = ["NPU0 NPU1 NPU2 NPU3 NPU4 NPU5 NPU6 NPU7 CPU Affinity"]
    for i in range(8):
        cells = ["X" if j == i else "HCCS" if j // 4 == i // 4 else "SYS" for j in range(8)]
        lines.append(" ".join([f"NPU{i}", *cells, "0-23"]))
    grouped = ascend.parse_topology("\n".join(lines))
    assert ascend.p2p_links(grouped, 5) == [{"peerMinor": "4,6,7", "type": "HCCS"}]
    assert ascend.parse_topology("") == {}


def test_davinci_minors_sort_numerically(tmp_path: Path) -> None:
    for name in fixture("ls-dev-davinci.910B1x8.txt").split():
        (tmp_path / Path(name).name).touch()
    assert ascend.davinci_minors(str(tmp_path)) == [str(i) for i in range(8)]  # davinci_manager is not a minor
    for i in (10, 11):
        (tmp_path / f"davinci{i}").touch()
    assert ascend.davinci_minors(str(tmp_path))[-3:] == ["7", "10", "11"]  # upstream's string sort: 10, 11, 2
    assert ascend.davinci_minors(str(tmp_path / "missing")) == []


def test_pci_placement_lowercases_and_keeps_unknown_bus(tmp_path: Path) -> None:
    add_pci_device(tmp_path, "0000:c1:00.0", bridges=["0000:c0:00.0"], vendor="19e5", device="d802",
                   class_code="120000", numa_node=6)
    paths = HostPaths.under(str(tmp_path))
    assert pci_placement(paths, "0000:C1:00.0") == ("0000:c1:00.0", "6", "pci0000:c0")
    assert pci_placement(paths, "0000:AB:00.0") == ("0000:ab:00.0", "", "")  # upstream: ("", "0", "")
    assert pci_placement(paths, "") == ("", "", "")


# --- the probe ------------------------------------------------------------------------------------------------

def _host(tmp_path: Path, npus: list[tuple[str, int]]) -> tuple[HostPaths, str]:
    for i, (bus, numa) in enumerate(npus):
        add_pci_device(tmp_path, f"0000:{bus}:00.0", bridges=[f"0000:00:{i + 1:02x}.0"],
                       vendor="19e5", device="d801", class_code="120000", numa_node=numa)
        (tmp_path / "dev").mkdir(exist_ok=True)
        (tmp_path / "dev" / f"davinci{i}").touch()
    (tmp_path / "dev" / "davinci_manager").touch()
    return HostPaths.under(str(tmp_path)), str(tmp_path / "dev")


def _list(*cards: int) -> str:
    # Constructed: no public `npu-smi info -l` recording; key : value lines as the other detail outputs.
    return f"\tTotal Count                    : {len(cards)}\n\n" + "".join(
        f"\tNPU ID                         : {c}\n\tChip Count                     : 1\n\n" for c in cards)


def test_probe_on_the_recorded_910a_host(tmp_path: Path) -> None:
    before = fixture("mindcluster-faultdiag.npu_info_before.910Ax8.txt")
    paths, dev = _host(tmp_path, [("61", 1)])
    run = ReplayRunner({
        (SMI, "info", "-m"): section(before, "/usr/local/bin/npu-smi info -m"),
        (SMI, "info", "-l"): _list(0),
        (SMI, "info", "-t", "board", "-i", "0"): section(before, "/usr/local/bin/npu-smi info -i 0 -t board"),
        (SMI, "info", "-t", "usages", "-i", "0"): section(before, "/usr/local/bin/npu-smi info -i 0 -t usages"),
        (SMI, "info", "-t", "health", "-i", "0", "-c", "0"):
            section(before, "/usr/local/bin/npu-smi info -i 0 -c 0 -t health"),
    })
    assert ascend.collect(run, paths, dev) == [{
        "vendor": "huawei", "model": "Ascend-910A", "uuid": "npu-0-0", "minor": "0",
        # -t memory unrecorded -> -t usages; common and cpu-num-cfg unrecorded -> those resources omitted
        "resources": {"koordinator.sh/gpu-memory": "44682Mi", "huawei.com/npu-dvpp": "100"},
        "topology": {"socketID": "-1", "nodeID": "1", "pcieID": "pci0000:00", "busID": "0000:61:00.0"},
        "status": {"healthy": True}}]
    assert [SMI, "info", "-t", "memory", "-i", "0"] in run.calls  # upstream's query is tried first
    assert [SMI, "info", "-t", "health", "-i", "0", "-c", "0"] in run.calls  # no summary table: ask per card


def test_probe_degraded_host(tmp_path: Path) -> None:
    """NPU 0 answers `Invalid card id.` to -t board (recorded after the fault): skipped, as upstream. NPU 1's health
    alarm uses the recorded Alarm output (replayed for NPU 1)."""
    before = fixture("mindcluster-faultdiag.npu_info_before.910Ax8.txt")
    after = fixture("mindcluster-faultdiag.npu_info_after.910Ax8-degraded.txt")
    paths, dev = _host(tmp_path, [("61", 0), ("db", 1)])
    board1 = section(before, "/usr/local/bin/npu-smi info -i 0 -t board").replace("61:00.0", "DB:00.0")
    run = ReplayRunner({
        (SMI, "info", "-m"): section(before, "/usr/local/bin/npu-smi info -m"),
        (SMI, "info", "-l"): _list(0, 1),
        (SMI, "info", "-t", "memory", "-i", "0"): section(before, "/usr/local/bin/npu-smi info -i 0 -t usages"),
        (SMI, "info", "-t", "board", "-i", "0"): CommandError(
            [SMI, "info", "-t", "board", "-i", "0"], "exit status 1",
            section(after, "/usr/local/bin/npu-smi info -i 0 -t board")),
        (SMI, "info", "-t", "board", "-i", "1"): board1,
        (SMI, "info", "-t", "health", "-i", "1", "-c", "0"):
            section(after, "/usr/local/bin/npu-smi info -i 0 -c 0 -t health"),
    })
    [entry] = ascend.collect(run, paths, dev)
    assert entry["uuid"] == "npu-1-1" and entry["topology"]["busID"] == "0000:db:00.0"
    assert entry["status"] == {
        "healthy": False, "errCode": "A4025021 8C03A000 8C084E00",
        "errMessage": "ascend_monitor adda heart beat lost error; node type=process-manager, sensor type=General "
                      "Software, event state=The process start failed or exit abnormally; node type=adda, sensor "
                      "type=Heartbeat Sensor, event state=Heartbeat Lost."}


def test_probe_summary_health_chip_fault_and_fixed_models(tmp_path: Path) -> None:
    paths, dev = _host(tmp_path, [("c1", 0), ("01", 0), ("c2", 0)])
    summary = fixture("npu-smi-info.910B3x8.vllm-ascend-issue1903.excerpt.txt").replace(
        "| 2     910B3               | OK  ", "| 2     910B3               | Alarm")
    boards = {c: f"\tPCIe Bus Info                  : 0000:{b}:00.0\n"
              for c, b in (("0", "C1"), ("1", "01"), ("2", "C2"))}
    boards["1"] += "\tChip Fault                     : 2\n"  # constructed: upstream's fault line
    run = ReplayRunner({
        (SMI, "info"): summary,
        (SMI, "info", "-m"): "NPU ID  Chip ID  Chip Logic ID  Chip Name\n0 0 0 Ascend 910B3\n1 0 1 Ascend 910B3\n"
                             "2 0 2 Ascend 910B3\n",
        (SMI, "info", "-l"): _list(0, 1, 2),
        (SMI, "info", "-t", "usages", "-i", "0"): fixture("npu-smi-info-t-usages-i0.910B1.txt"),
        **{(SMI, "info", "-t", "board", "-i", c): text for c, text in boards.items()},
    })
    entries = ascend.collect(run, paths, dev)
    assert [e["status"] for e in entries] == [
        {"healthy": True},
        {"healthy": False, "errCode": "chip error", "errMessage": "NPU index 1 has 2 chip faults"},
        {"healthy": False, "errCode": "Alarm", "errMessage": "npu-smi reports health Alarm"}]
    assert entries[0]["resources"]["huawei.com/npu-cpu"] == "7"  # upstream's table for Ascend-910B3
    assert [SMI, "info", "-t", "cpu-num-cfg", "-i", "0"] not in run.calls
    assert [SMI, "info", "-t", "health", "-i", "0", "-c", "0"] not in run.calls  # OK in the summary: no query


def test_probe_310p3_and_memory_fallback(tmp_path: Path) -> None:
    paths, dev = _host(tmp_path, [("01", 0)])
    not_found = CommandError([SMI], "exit status 1", "Command or option is not found")
    run = ReplayRunner({
        (SMI, "info", "-m"): "NPU ID  Chip ID  Chip Logic ID  Chip Name\n2 0 0 Ascend 310P3\n",
        (SMI, "info", "-l"): _list(2),
        (SMI, "info", "-t", "memory", "-i", "2"): not_found,
        (SMI, "info", "-t", "cpu-num-cfg", "-i", "2"): "\tCurrent AI CPU number          : 3\n",
        (SMI, "info", "-t", "board", "-i", "2"): "\tPCIe Bus Info : 0000:01:00.0\n",
    })
    [entry] = ascend.collect(run, paths, dev)
    assert entry["resources"] == {"koordinator.sh/gpu-memory": "21527Mi", "huawei.com/npu-core": "8",
                                  "huawei.com/npu-cpu": "3", "huawei.com/npu-dvpp": "100"}
    assert entry["uuid"] == "npu-2-0" and "p2pLinks" not in entry["topology"]
    assert [SMI, "info", "-t", "topo"] not in run.calls  # upstream: topo not supported on 310P3


def test_probe_pairs_cards_with_minors_up_to_the_shorter_list(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    paths, dev = _host(tmp_path, [("61", 0)])  # one davinci node, two cards listed
    board = fixture("npu-smi-info-i0-t-board.910A.txt")
    run = ReplayRunner({(SMI, "info", "-m"): fixture("npu-smi-info-m.910Ax8.txt"), (SMI, "info", "-l"): _list(0, 1),
                        (SMI, "info", "-t", "board", "-i", "0"): board, (SMI, "info", "-t", "board", "-i", "1"): board})
    assert [e["uuid"] for e in ascend.collect(run, paths, dev)] == ["npu-0-0"]
    assert "2 NPU cards but" in caplog.text


def test_probe_requires_model_and_cards(tmp_path: Path) -> None:
    paths, dev = _host(tmp_path, [("01", 0)])
    with pytest.raises(CommandError):
        ascend.collect(ReplayRunner({}), paths, dev)
    with pytest.raises(VendorError):
        ascend.collect(ReplayRunner({(SMI, "info", "-m"): fixture("npu-smi-info-m.910Ax8.txt"),
                                     (SMI, "info", "-l"): "Total Count : 0\n"}), paths, dev)
    with pytest.raises(VendorError, match="davinci"):  # /dev not mounted: not "zero NPUs"
        ascend.collect(ReplayRunner({(SMI, "info", "-m"): fixture("npu-smi-info-m.910Ax8.txt"),
                                     (SMI, "info", "-l"): _list(0)}), paths, str(tmp_path / "no-dev"))


def test_npu_detection_excludes_bmc_functions() -> None:
    assert ascend.is_npu("19e5", "d801") and ascend.is_npu("19e5", "d802")
    assert not ascend.is_npu("19e5", "1710") and not ascend.is_npu("19e5", "1711")
    assert not ascend.is_npu("10de", "d801")

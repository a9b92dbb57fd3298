"""The device daemon end to end with replayed vendor outputs, and the example nodes regenerating identically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from koordlet.devices import device_daemon as dd
from koordlet.devices.device_daemon import (
    Collector,
    ReplayRunner,
    detect_vendors,
    dev_root_for,
    encode_device_infos,
    run_device_daemon,
    subprocess_runner,
)
from koordlet.devices.vendors import CommandError
from koordlet.devices.xpu import read_device_infos
from koordlet.health import Health
from koordlet.host.paths import HostPaths

from conftest import CRD_DIR, require
from simpci import add_pci_device

FIXTURES = CRD_DIR.parent / "fixtures" / "vendor-outputs"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nodes"
SMI = "npu-smi"


def fixture(name: str) -> str:
    require((FIXTURES / name).is_file(), f"recorded vendor output {name} not found")
    return (FIXTURES / name).read_text()


def _host(tmp_path: Path) -> HostPaths:
    """Two 910A NPUs (bus ids of the recorded Atlas 800 9010), a Huawei BMC function and two MLU370-X4 cards."""
    add_pci_device(tmp_path, "0000:61:00.0", bridges=["0000:60:00.0"], vendor="19e5", device="d801",
                   class_code="120000", numa_node=0)
    add_pci_device(tmp_path, "0000:db:00.0", bridges=["0000:da:00.0"], vendor="19e5", device="d801",
                   class_code="120000", numa_node=1)
    add_pci_device(tmp_path, "0000:05:00.0", bridges=["0000:00:1c.0"], vendor="19e5", device="1710",
                   class_code="030000", numa_node=0)
    add_pci_device(tmp_path, "0000:1b:00.0", bridges=["0000:1a:00.0"], vendor="cabc", device="0370",
                   class_code="120000", numa_node=0)
    add_pci_device(tmp_path, "0000:36:00.0", bridges=["0000:35:00.0"], vendor="cabc", device="0370",
                   class_code="120000", numa_node=0)
    (tmp_path / "dev").mkdir()
    for name in ("davinci0", "davinci1", "davinci_manager"):
        (tmp_path / "dev" / name).touch()
    return HostPaths.under(str(tmp_path))


def _outputs() -> dict[tuple[str, ...], str | CommandError]:
    table = fixture("npu-smi-info.atlas800-9010.910Ax8.v22.0.3.1.huawei-doc.txt")
    board = fixture("npu-smi-info-i0-t-board.910A.txt")
    info = "  UUID : {u}\n  NUMA node id : 0\n  Device : Good\n"  # constructed: no public `cnmon info` sample
    return {
        (SMI, "info"): table,
        (SMI, "info", "-m"): fixture("npu-smi-info-m.atlas800-9010.910Ax8.v22.0.3.1.huawei-doc.txt"),
        (SMI, "info", "-l"): "\tNPU ID : 0\n\tNPU ID : 1\n",  # constructed
        (SMI, "info", "-t", "usages", "-i", "0"): fixture("npu-smi-info-i0-t-usages.910A.txt"),
        (SMI, "info", "-t", "board", "-i", "0"): board,
        (SMI, "info", "-t", "board", "-i", "1"): board.replace("0000:61:00.0", "0000:DB:00.0"),
        ("cnmon",): fixture("cnmon.mlu370-x4x2.v5.10.10.paddle-doc.txt"),
        ("cnmon", "info", "-c", "0"): info.format(u="mlu-uuid-0"),
        ("cnmon", "info", "-c", "1"): info.format(u="mlu-uuid-1"),
    }


EXPECTED_FIRST = """[
  {
    "vendor": "huawei",
    "model": "Ascend-910A",
    "uuid": "npu-0-0",
    "minor": "0",
    "resources": {
      "huawei.com/npu-dvpp": "100",
      "koordinator.sh/gpu-memory": "44682Mi"
    },
    "topology": {
      "socketID": "-1",
      "nodeID": "0",
      "pcieID": "pci0000:60",
      "busID": "0000:61:00.0"
    },
    "status": {
      "healthy": true
    }
  },"""


def test_oneshot_writes_the_upstream_file(tmp_path: Path) -> None:
    paths = _host(tmp_path / "host")
    out = tmp_path / "host/var/run/koordlet/xpu-device-infos/ic-device"
    run = ReplayRunner(_outputs())
    assert run_device_daemon(paths, str(out), oneshot=True, runner=run) == 0
    text = out.read_text()
    assert text.startswith(EXPECTED_FIRST) and not text.endswith("\n")  # Go's MarshalIndent, byte for byte
    infos = json.loads(text)
    assert [(i["vendor"], i["uuid"], i["topology"]["busID"]) for i in infos] == [
        ("huawei", "npu-0-0", "0000:61:00.0"), ("huawei", "npu-1-1", "0000:db:00.0"),
        ("cambricon", "mlu-uuid-0", "0000:1b:00.0"), ("cambricon", "mlu-uuid-1", "0000:36:00.0")]
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert os.listdir(out.parent) == ["ic-device"]  # no temp file left
    assert read_device_infos(paths, Health()) == [
        {**i, "topology": {"p2pLinks": None, "mustHonorPartition": False, **i["topology"]},
         "status": {"errCode": "", "errMessage": "", **i["status"]}} for i in infos]
    assert out.exists()  # oneshot keeps its file


def test_vendor_detection(tmp_path: Path) -> None:
    paths = _host(tmp_path)
    assert detect_vendors(paths) == ["huawei", "cambricon"]
    bmc_only = tmp_path / "bmc"
    add_pci_device(bmc_only, "0000:05:00.0", bridges=["0000:00:1c.0"], vendor="19e5", device="1711",
                   class_code="030000")
    assert detect_vendors(HostPaths.under(str(bmc_only))) == []
    assert detect_vendors(HostPaths.under(str(tmp_path / "empty"))) == []


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _host(tmp_path / "host")
    out = tmp_path / "out" / "ic-device"
    out.parent.mkdir()
    out.write_text("[]")

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    assert run_device_daemon(paths, str(out), oneshot=True, runner=ReplayRunner(_outputs())) == 1
    assert out.read_text() == "[]" and os.listdir(out.parent) == ["ic-device"]


def test_loop_rewrites_then_removes_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _host(tmp_path / "host")
    out = tmp_path / "ic-device"
    stop = threading.Event()
    rounds: list[int] = []
    original = dd.write_device_infos

    def counting(path: str, infos: list[dict[str, Any]]) -> None:
        original(path, infos)
        rounds.append(len(infos))
        if len(rounds) == 3:
            assert json.loads(out.read_text())[0]["uuid"] == "npu-0-0"
            stop.set()

    monkeypatch.setattr(dd, "write_device_infos", counting)
    t = threading.Thread(target=run_device_daemon, args=(paths, str(out)),
                         kwargs={"interval": 0.01, "runner": ReplayRunner(_outputs()), "stop": stop})
    t.start()
    t.join(10)
    assert not t.is_alive() and rounds == [4, 4, 4]
    assert not out.exists()  # removed on exit, as upstream's deferred removeOutputFile


def test_failing_vendor_keeps_its_last_entries(tmp_path: Path) -> None:
    paths = _host(tmp_path)
    outputs = _outputs()
    collector = Collector(paths, ReplayRunner(outputs))
    first = collector.collect()
    outputs[(SMI, "info", "-m")] = CommandError([SMI, "info", "-m"], "timed out after 60s")
    collector.runner = ReplayRunner(outputs)
    assert collector.collect() == first
    outputs[("cnmon",)] = "garbage"
    collector.runner = ReplayRunner(outputs)
    assert [i["vendor"] for i in collector.collect()] == ["huawei"] * 2 + ["cambricon"] * 2
    fresh = Collector(paths, ReplayRunner(outputs))  # no earlier success: nothing for the failing vendors
    assert fresh.collect() == []


def test_parser_bug_does_not_kill_the_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _host(tmp_path)

    def boom(run: Any, p: Any, dev: str) -> list[dict[str, Any]]:
        raise IndexError("list index out of range")

    monkeypatch.setitem(dd.VENDORS, "huawei", (dd.VENDORS["huawei"][0], boom))
    assert [i["vendor"] for i in Collector(paths, ReplayRunner(_outputs())).collect()] == ["cambricon"] * 2


def test_go_json_encoding() -> None:
    text = encode_device_infos([{"uuid": "a<b>&c", "minor": "0", "model": "m", "vendor": "v",
                                 "resources": {"z": "1", "a": "2"},
                                 "topology": {"busID": "", "socketID": "-1", "p2pLinks": [],
                                              "mustHonorPartition": False},
                                 "status": {"healthy": False, "errCode": "", "errMessage": "x\u2028y"}}])
    assert text == ('[\n  {\n    "vendor": "v",\n    "model": "m",\n    "uuid": "a\\u003cb\\u003e\\u0026c",\n'
                    '    "minor": "0",\n    "resources": {\n      "a": "2",\n      "z": "1"\n    },\n'
                    '    "topology": {\n      "socketID": "-1"\n    },\n    "status": {\n      "healthy": false,\n'
                    '      "errMessage": "x\\u2028y"\n    }\n  }\n]')
    assert encode_device_infos([]) == "[]"


def test_stdout_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_device_daemon(_host(tmp_path), "-", oneshot=True, runner=ReplayRunner(_outputs())) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4


def test_subprocess_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    assert subprocess_runner()([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]) \
        == "out\nerr\n"  # combined, as Go's CombinedOutput
    with pytest.raises(CommandError) as failed:
        subprocess_runner()([sys.executable, "-c", "print('Command or option is not found'); raise SystemExit(3)"])
    assert "exit status 3" in str(failed.value) and failed.value.output.startswith("Command or option")
    with pytest.raises(CommandError):
        subprocess_runner()(["/nonexistent/npu-smi", "info"])
    with pytest.raises(CommandError, match="timed out"):
        subprocess_runner(timeout=0.2)([sys.executable, "-c", "import time; time.sleep(5)"])
    seen: list[list[str]] = []

    def fake(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, b"ok")

    monkeypatch.setattr(subprocess, "run", fake)
    assert subprocess_runner("/hostfs")([SMI, "info", "-m"]) == "ok"
    subprocess_runner("/")([SMI, "info"])
    assert seen == [["chroot", "/hostfs", SMI, "info", "-m"], [SMI, "info"]]


def test_dev_root() -> None:
    assert dev_root_for(HostPaths.under("/tmp/node")) == "/tmp/node/dev"
    assert dev_root_for(HostPaths.defaults({})) == "/dev"
    assert dev_root_for(HostPaths.defaults({"agent_mode": "hostMode"})) == "/dev"


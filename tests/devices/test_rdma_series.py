"""RDMA port series from sysfs: the real H100 `/sys/class/infiniband` fixture, and Koordinator's k8s-node1 (CX-5 PFs
and a VF allocated to a pod) with counters, as node_exporter's infiniband collector reads them."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from koordlet.devices import rdma
from koordlet.devices.metrics import DeviceView, device_families
from koordlet.devices.pcinames import model_name
from koordlet.devices.rdma_metrics import RDMACollector
from koordlet.devices.rdma_stats import read_infiniband
from koordlet.exporter import render_text
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.host.paths import HostPaths
from koordlet.states.model import PodMeta

from conftest import require
from simhost import SimHost, make_pod
from simpci import add_rdma_nic, set_port_counters

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "vendor-outputs"
# the scheduler's annotation on k8s-node1's GPU+RDMA pod (koordinator-pod-annotation.device-allocated...node1)
ALLOCATED = ('{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"23040Mi",'
             '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},'
             '"extension":{"vfs":[{"minor":-1,"busID":"0000:01:00.2"}]}}]}')


def _node1(root: Path) -> HostPaths:
    """k8s-node1 as ibstat shows it: CX-5 PF mlx5_0 (01:00.0) with VF mlx5_2 (01:00.2, 15b3:1018 as lspci names
    it), PF mlx5_1 (01:00.1) Down."""
    add_rdma_nic(root, "0000:01:00.0", bridges=["0000:00:01.0"], ib_dev="mlx5_0", netdev="ens1f0np0", numa_node=0,
                 device="1017", vfs=[("0000:01:00.2", "mlx5_2", "ens1f0v0")], vf_device="1018")
    add_rdma_nic(root, "0000:01:00.1", bridges=["0000:00:01.0"], ib_dev="mlx5_1", netdev="ens1f1np1", numa_node=0,
                 device="1017", port_state="1: DOWN", uverbs=2)
    return HostPaths.under(str(root))


def _pod(annotation: str | None, name: str = "rdma-pod") -> PodMeta:
    raw: dict[str, Any] = {"metadata": {"annotations": {} if annotation is None else
                                        {"scheduling.koordinator.sh/device-allocated": annotation}}}
    return PodMeta(f"uid-{name}", "ml", name, "Guaranteed", "LS", "koord-prod", "Running", "", (), raw)


def _samples(collector: Any) -> dict[str, list[Any]]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(render_text(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_the_real_h100_sysfs_fixture(tmp_path: Path) -> None:
    src = FIXTURES / "sysfs" / "sys-class-infiniband.h100.gpud"
    require(src.is_dir(), "shared/fixtures/vendor-outputs/sysfs not found")
    shutil.copytree(src, tmp_path / "sys/class/infiniband")
    devices = {d.name: d for d in read_infiniband(HostPaths.under(str(tmp_path)))}
    assert set(devices) == {"mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
                            "mlx5_bond_0"}
    cx7 = devices["mlx5_4"]
    assert (cx7.hca_type, cx7.firmware_version, cx7.board_id) == ("MT4129", "28.41.1000", "MT_0000000838")
    [port] = cx7.ports
    assert (port.port, port.state_id, port.state, port.phys_state_id, port.phys_state) == (1, 4, "ACTIVE", 5,
                                                                                           "LinkUp")
    assert port.rate_bytes == 400 * 125_000_000 and port.link_layer == "InfiniBand"
    assert port.counters == {} and port.hw_counters == {}  # the fixture dropped them
    assert devices["mlx5_bond_0"].ports[0].link_layer == "Ethernet"
    assert cx7.bdf == "" and cx7.model == ""  # plain directories: no PCI function to name
    s = _samples(RDMACollector("h100", HostPaths.under(str(tmp_path)), list))
    assert len(s["koordlet_rdma_state_id"]) == 9
    assert {x.value for x in s["koordlet_rdma_rate_bytes_per_second"] if x.labels["device"] == "mlx5_4"} == {5e10}


def test_counters_units_models_and_the_pods_vf(tmp_path: Path) -> None:
    paths = _node1(tmp_path)
    set_port_counters(tmp_path, "mlx5_0", {"port_xmit_data": 1000, "port_rcv_data": 250, "port_rcv_errors": 3,
                                           "symbol_error": "N/A (no PMA)"},
                      {"out_of_buffer": 7, "np_cnp_sent": 2})
    set_port_counters(tmp_path, "mlx5_2", {"port_xmit_data": 40, "port_rcv_packets": 9})
    now = [100.0]
    collector = RDMACollector("node1", paths, lambda: [_pod(ALLOCATED), _pod(None, "other")], clock=lambda: now[0])
    s = _samples(collector)

    def value(name: str, device: str, **labels: str) -> float:
        [x] = [x for x in s[name] if x.labels["device"] == device and labels.items() <= x.labels.items()]
        return float(x.value)

    # port_*_data count 4-byte words: bytes are × 4 (procfs); a counter the kernel answers N/A is left out
    assert value("koordlet_rdma_port_data_transmitted_bytes_total", "mlx5_0") == 4000
    assert value("koordlet_rdma_port_data_received_bytes_total", "mlx5_0") == 1000
    assert value("koordlet_rdma_port_errors_received_total", "mlx5_0") == 3
    assert "mlx5_0" not in {x.labels["device"] for x in s["koordlet_rdma_symbol_error_total"]}
    assert value("koordlet_rdma_hw_counter_total", "mlx5_0", counter="out_of_buffer") == 7
    assert value("koordlet_rdma_state_id", "mlx5_1") == 1 and value("koordlet_rdma_physical_state_id", "mlx5_1") == 3
    assert value("koordlet_rdma_rate_bytes_per_second", "mlx5_0") == 25 * 125_000_000
    info = {x.labels["device"]: x.labels for x in s["koordlet_rdma_device_info"]}
    assert info["mlx5_0"]["model"] == "MT27800 Family [ConnectX-5]" and info["mlx5_0"]["pci_bus_id"] == "0000:01:00.0"
    assert info["mlx5_2"]["model"] == "MT27800 Family [ConnectX-5 Virtual Function]"
    assert info["mlx5_2"]["physical_function"] == "0000:01:00.0" and info["mlx5_0"]["physical_function"] == ""
    assert (info["mlx5_0"]["hca_type"], info["mlx5_0"]["firmware_version"]) == ("MT4119", "16.35.4030")

    # the VF in the pod's device-allocated is the pod's; the PF (shared) and the pod without devices get nothing
    [pinfo] = s["koordlet_pod_rdma_device_info"]
    assert pinfo.labels == {"node": "node1", "namespace": "ml", "pod": "rdma-pod", "uid": "uid-rdma-pod",
                            "device": "mlx5_2", "pci_bus_id": "0000:01:00.2"}
    [tx] = s["koordlet_pod_rdma_port_data_transmitted_bytes_total"]
    assert tx.labels["pod"] == "rdma-pod" and tx.labels["port"] == "1" and tx.value == 160
    assert [x.value for x in s["koordlet_pod_rdma_port_packets_received_total"]] == [9]

    # sysfs is read at most once per min_interval, however often scrapes come
    set_port_counters(tmp_path, "mlx5_0", {"port_xmit_data": 2000})
    now[0] += 1.0
    s = _samples(collector)
    assert value("koordlet_rdma_port_data_transmitted_bytes_total", "mlx5_0") == 4000
    now[0] += 5.0
    s = _samples(collector)
    assert value("koordlet_rdma_port_data_transmitted_bytes_total", "mlx5_0") == 8000


def test_a_malformed_allocation_attributes_nothing(tmp_path: Path) -> None:
    paths = _node1(tmp_path)
    s = _samples(RDMACollector("node1", paths, lambda: [_pod('{"rdma": 5}'), _pod("not json", "b")]))
    assert "koordlet_pod_rdma_device_info" not in s and len(s["koordlet_rdma_device_info"]) == 3


def test_the_device_series_model_label_of_rdma_devices(tmp_path: Path) -> None:
    paths = _node1(tmp_path)
    entries = rdma.discover(paths, Health()).devices
    view = DeviceView(entries, models=rdma.models(paths, entries))
    [healthy] = [f for f in device_families("node1", view) if f.name == "koordlet_device_healthy"]
    assert {s.labels["uuid"]: s.labels["model"] for s in healthy.samples} == {
        "0000:01:00.0": "MT27800 Family [ConnectX-5]", "0000:01:00.1": "MT27800 Family [ConnectX-5]"}


@pytest.mark.parametrize(("vendor", "device", "name"), [("15b3", "101d", "MT2892 Family [ConnectX-6 Dx]"),
                                                        ("15b3", "9999", "15b3:9999"), ("", "101d", "")])
def test_model_names(vendor: str, device: str, name: str) -> None:
    assert model_name(vendor, device) == name


def test_koordlet_run_serves_the_pods_vf_counters(tmp_path: Path) -> None:
    """`koordlet run` on a simulated k8s-node1 (gate RDMADevices) with the scheduler's real annotation on a pod."""
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    _node1(host.root)
    set_port_counters(host.root, "mlx5_2", {"port_rcv_data": 5})
    pod = make_pod("rdma-pod", "eeeeeeee-0000-4000-8000-000000000027", namespace="ml")
    pod["metadata"]["annotations"] = {"scheduling.koordinator.sh/device-allocated": ALLOCATED}  # type: ignore[index]
    (tmp_path / "pods").mkdir()
    (tmp_path / "pods" / "pod.yaml").write_text(yaml.safe_dump(pod))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "koordlet", "run", "--host-root", str(host.root), "--pods-dir", str(tmp_path / "pods"),
         "--node-name", "node1", "--state-dir", str(tmp_path / "state"), "--addr", f"127.0.0.1:{port}",
         "--feature-gates", "RDMADevices=true", "--enable-nri-runtime-hook=false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, text = time.monotonic() + 15, ""
        while time.monotonic() < deadline and "koordlet_pod_rdma_device_info{" not in text:
            time.sleep(0.3)
            with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
                text = r.read().decode()
    finally:
        proc.kill()
        proc.wait(timeout=10)
    [rx] = [line for line in text.splitlines() if line.startswith("koordlet_pod_rdma_port_data_received_bytes_total{")]
    assert 'pod="rdma-pod"' in rx and 'device="mlx5_2"' in rx and rx.endswith(" 20.0")
    [pf] = [line for line in text.splitlines() if line.startswith("koordlet_device_healthy{")
            and 'uuid="0000:01:00.0"' in line]
    assert 'model="MT27800 Family [ConnectX-5]"' in pf

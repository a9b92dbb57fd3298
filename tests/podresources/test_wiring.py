"""The proxy as `koordlet run` builds it: paths from the flags, and bad allocations posted as Events on the pod."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from koordlet.agent import Agent
from koordlet.cli import config_from_args, parse_args
from koordlet.config import Config, PodResourcesProxyConfig
from koordlet.host.driver import CgroupDriver
from koordlet.host.paths import HostPaths
from koordlet.podresources.merge import MALFORMED, NO_ID, UNKNOWN_TYPE, Problem
from koordlet.podresources.wiring import pod_resources_proxy

from simhost import SimHost


def test_socket_paths_follow_the_roots() -> None:
    ds = HostPaths.defaults({})
    pr = PodResourcesProxyConfig()
    assert pr.socket(ds) == "/host-var-run/koordlet/pod-resources/kubelet.sock"  # host /var/run/koordlet/...
    assert pr.kubelet_socket(ds) == "/var/lib/kubelet/pod-resources/kubelet.sock"
    under = HostPaths.under("/node")
    assert pr.socket(under, "/node") == "/node/var/run/koordlet/pod-resources/kubelet.sock"
    assert pr.kubelet_socket(under) == "/node/var/lib/kubelet/pod-resources/kubelet.sock"
    flag = PodResourcesProxyConfig(path="/var/run/multus-pr")
    assert flag.socket(ds) == "/var/run/multus-pr/kubelet.sock"
    assert flag.socket(under, "/node") == "/node/var/run/multus-pr/kubelet.sock"


def test_flags(tmp_path: Path) -> None:
    argv = ["run", "--host-root", str(tmp_path), "-pod-resources-proxy-path=/x/pr", "--pod-resources-proxy-qps", "0",
            "--pod-resources-proxy-burst", "20", "--pod-resources-proxy-max-age", "250ms",
            "--pod-resources-proxy-kubelet-timeout", "2s", "--feature-gates", "PodResourcesProxy=true"]
    cfg = config_from_args(parse_args(argv), env={})
    assert cfg.gate("PodResourcesProxy")
    assert cfg.pod_resources_proxy == PodResourcesProxyConfig("/x/pr", 0.0, 20, 0.25, 2.0)
    assert cfg.pod_resources_proxy.socket(cfg.paths, cfg.host_root) == f"{tmp_path}/x/pr/kubelet.sock"
    default = config_from_args(parse_args(["run", "--host-root", str(tmp_path)]), env={})
    assert not default.gate("PodResourcesProxy")  # off by default, as upstream
    assert default.pod_resources_proxy == PodResourcesProxyConfig()
    with pytest.raises(InvalidInput, match="burst"):
        PodResourcesProxyConfig(burst=0)


async def test_bad_allocations_become_events_on_the_pod(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    posted: list[tuple[str, dict[str, Any]]] = []
    cfg = Config(node_name="n1", paths=host.paths, host_root=str(host.root), state_dir=str(tmp_path / "s"),
                 feature_gates={"PodResourcesProxy": True})
    server = pod_resources_proxy(Agent(cfg), post_event=lambda path, body: posted.append((path, body)))
    assert server.socket_path == f"{host.root}/var/run/koordlet/pod-resources/kubelet.sock"
    assert server.kubelet.socket_path == f"{host.root}/var/lib/kubelet/pod-resources/kubelet.sock"
    assert server.report is not None
    with caplog.at_level(logging.INFO):
        server.report([Problem("ml/bad", "u-1", MALFORMED, "rdma[0]", "is null"),
                       Problem("ml/nogpuid", "u-2", NO_ID, "gpu[0].id", "minor 0 has no id; not listed"),
                       Problem("ml/fpga", "u-3", UNKNOWN_TYPE, "fpga", "device type 'fpga' has no kubelet resource "
                                                                      "name; not listed")])
        for _ in range(100):
            if len(posted) == 2:
                break
            await asyncio.sleep(0.01)
    assert [p for p, _ in posted] == ["/api/v1/namespaces/ml/events"] * 2
    event = posted[0][1]
    assert event["involvedObject"] == {"kind": "Pod", "name": "bad", "uid": "u-1", "namespace": "ml",
                                       "apiVersion": "v1"}
    assert event["reason"] == "InvalidDeviceAllocation"
    assert event["message"].startswith("annotations[scheduling.koordinator.sh/device-allocated].rdma[0]: "
                                       "PodResources proxy: is null")
    assert "ml/bad" in caplog.text and "ml/fpga" in caplog.text  # the unknown type: a log line, no Event
    await server.kubelet.close()

"""The scrape benchmark's node_exporter half: Debian's binary is found, started on a free port with its default
collectors, answers node_* series, and is gone once stopped; the series groups the table states; the node list."""

from __future__ import annotations

import argparse
import urllib.request
from pathlib import Path

import psutil
import pytest

from benchmarks import node_exporter, scrape_compare
from benchmarks.daemon import free_port

from conftest import require


def test_node_exporter_starts_answers_and_stops() -> None:
    binary = node_exporter.find()
    require(binary is not None, "node_exporter is not installed (scripts/install.sh dev installs Debian's "
                                "prometheus-node-exporter)")
    assert binary is not None
    port = free_port()
    with node_exporter.running(binary, port) as proc:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read()
        pid = proc.pid
    groups = scrape_compare.groups(text)
    assert groups["node_* collectors"] > 0 and groups["go/process/promhttp"] > 0
    assert proc.returncode is not None and not psutil.pid_exists(pid)


def test_series_are_grouped_by_family_prefix() -> None:
    text = (b"# HELP koordlet_gpu_temperature_celsius t\n"
            b'koordlet_gpu_temperature_celsius{gpu="0"} 40\nkoordlet_gpu_temperature_celsius{gpu="1"} 41\n'
            b'koordlet_rdma_port_data_received_bytes_total{device="mlx5_0",port="1"} 0\n'
            b'koordlet_pod_cpu_usage_seconds_total{pod="a"} 1\nkoordlet_container_memory_working_set_bytes 2\n'
            b"koordlet_agent_up 1\nnode_load1 0.5\ngo_goroutines 7\n")
    assert scrape_compare.groups(text) == {"GPU": 2, "RDMA": 1, "pod/container": 2, "other": 1,
                                           "node_* collectors": 1, "go/process/promhttp": 1}


def test_gpu_nodes_refuses_a_node_without_an_nvml_snapshot() -> None:
    assert scrape_compare.gpu_nodes("h100-hgx-smi,l20-pcie") == ["h100-hgx-smi", "l20-pcie"]
    with pytest.raises(argparse.ArgumentTypeError, match="'mlu370' is not a bundled GPU snapshot node"):
        scrape_compare.gpu_nodes("h100-hgx-smi,mlu370")


def test_baseline_is_a_koordlet_checkout_and_before_after_compares_series_not_values(tmp_path: Path) -> None:
    root = Path(scrape_compare.__file__).resolve().parents[1]
    assert scrape_compare.checkout(str(root)) == root
    with pytest.raises(argparse.ArgumentTypeError, match="not a koordlet source tree"):
        scrape_compare.checkout(str(tmp_path))
    before = b'# HELP a x\n# TYPE a gauge\na{p="1"} 1.0\na{p="2"} 2.0\n'
    after = b'# HELP a x\n# TYPE a gauge\na{p="2"} 5.0\na{p="1"} 3.0\n'  # other values, other order
    assert scrape_compare.series_and_headers(before) == scrape_compare.series_and_headers(after)
    assert scrape_compare.series_and_headers(before) != scrape_compare.series_and_headers(after + b'a{p="3"} 1\n')
    assert scrape_compare.series_and_headers(before) != scrape_compare.series_and_headers(
        after.replace(b"gauge", b"counter"))

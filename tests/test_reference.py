"""README's configuration and metrics references are what the code generates (`make docs` rewrites them)."""

from __future__ import annotations

from pathlib import Path

from koordlet.config import FEATURE_GATES
from koordlet.reference import KEY_ROLES, metric_catalogue, render, source_keys

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_references_are_current() -> None:
    text = README.read_text()
    assert render(text) == text, "README.md's generated references are stale: run `make docs`"


def test_every_annotation_and_label_the_code_names_is_described() -> None:
    keys = source_keys()
    assert not set(keys) - set(KEY_ROLES), "describe these keys in koordlet/reference.py KEY_ROLES"
    assert not set(KEY_ROLES) - set(keys), "KEY_ROLES names keys the code no longer uses"


def test_features_of_the_day_are_in_the_references() -> None:
    text = README.read_text()
    for gate in ("BECPUSuppress", "BatchResource", "CPUBurst", "CPUSetAllocator", "NodeTopologyReport",
                 "CPUSchedLatency"):
        assert f"| `{gate}` | {str(FEATURE_GATES[gate]).lower()} |" in text
    for flag in ("-disable-unset-cpu-quota", "-node-topology-sync-interval", "-disable-query-kubelet-config"):
        assert f"| `{flag}` |" in text
    for key in ("koordinator.sh/cpuBurst", "node.koordinator.sh/extended-resource-spec",
                "scheduling.koordinator.sh/resource-status", "node.koordinator.sh/cpu-shared-pools"):
        assert f"| `{key}` |" in text
    catalogue = metric_catalogue()
    for name in ("koordlet_be_suppress_cpu_cores", "koordlet_pod_cpu_schedule_latency_seconds",
                 "koordlet_device_healthy", "koordlet_pod_gpu_core_usage_percent"):
        assert name in catalogue and f"| `{name}` |" in text

"""Every runtime dependency in pyproject.toml is imported by the shipped code; the heavy ones we dropped stay out."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# distribution name → the module the code imports
MODULE = {"nvidia-ml-py": "pynvml", "pyroute2": "pyroute2", "urllib3": "urllib3",
          "prometheus-client": "prometheus_client", "PyYAML": "yaml", "numpy": "numpy",
          "protobuf": "google.protobuf", "grpcio": "grpc"}


def _runtime_dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]]


def test_every_runtime_dependency_is_imported() -> None:
    sources = "\n".join(p.read_text() for pkg in ("apis", "koordlet", "scheduler") for p in (ROOT / pkg).rglob("*.py"))
    for dist in _runtime_dependencies():
        assert dist in MODULE, f"{dist}: new runtime dependency, add its module here and say why in the README"
        mod = re.escape(MODULE[dist])
        assert re.search(rf"^\s*(import|from) {mod}\b", sources, re.M), f"{dist} is listed but never imported"


def test_agent_runs_without_kubernetes_or_psutil_and_loads_grpc_only_for_the_proxy() -> None:
    """grpcio (+12 MiB RSS) is imported when the PodResourcesProxy gate is on, not by the agent otherwise."""
    code = ("import sys, koordlet.cli, koordlet.agent, koordlet.cluster, apis.client.kubeapi, koordlet.exporter, "
            "koordlet.daemon; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'grpc', 'google', 'psutil'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"

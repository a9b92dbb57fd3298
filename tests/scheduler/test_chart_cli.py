"""koord-sched's command line as a chart user meets it: `simulate` refuses missing or absent inputs in one line
(exit 2) and prints `-o yaml` as the same object as `-o json`; `run` takes kube-scheduler's flags as the chart
renders them."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scheduler import kubeflags
from scheduler.cli import main

NODE = "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '4', memory: 8Gi, pods: '10'}}\n"
POD = ("kind: Pod\nmetadata: {name: p, namespace: default}\n"
       "spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}\n")


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "cluster.yaml").write_text(NODE)
    (tmp_path / "pods.yaml").write_text(POD)
    return str(tmp_path / "cluster.yaml"), str(tmp_path / "pods.yaml")


@pytest.mark.parametrize(("args", "said"), [
    (["--pods", "{pods}"], "simulate: --cluster is required"),
    (["--cluster", "{cluster}"], "simulate: --pods is required"),
    (["--cluster", "/nope/cluster", "--pods", "{pods}"], "simulate: --cluster /nope/cluster: no such file"),
    (["--cluster", "{cluster}", "--pods", "/nope/pods"], "simulate: --pods /nope/pods: no such file"),
])
def test_simulate_without_its_inputs_exits_2_in_one_line(files: tuple[str, str], args: list[str], said: str,
                                                         caplog: pytest.LogCaptureFixture,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    cluster, pods = files
    argv = ["simulate", *[a.format(cluster=cluster, pods=pods) for a in args]]
    with caplog.at_level(logging.ERROR):
        assert main(argv) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and said in errors[0]
    assert capsys.readouterr().out == ""


def test_simulate_unreadable_objects_exit_2_without_traceback(tmp_path: Path, files: tuple[str, str]) -> None:
    (tmp_path / "broken.yaml").write_text("kind: Pod\nmetadata: [\n")
    proc = subprocess.run([sys.executable, "-m", "scheduler.cli", "simulate", "--cluster", files[0], "--pods",
                           str(tmp_path / "broken.yaml")], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == ""
    assert "simulate: reading the objects:" in proc.stderr


def test_yaml_output_is_the_json_object(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    cluster, pods = files
    assert main(["simulate", "--cluster", cluster, "--pods", pods, "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["simulate", "--cluster", cluster, "--pods", pods, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json
    assert as_json["placements"][0]["node"] == "n1"


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--addr", default=None)
    kubeflags.add_flags(p)
    return p.parse_args(list(argv))


def test_kube_scheduler_flags_as_the_chart_renders_them() -> None:
    ns = parse("--port=10251", "--authentication-skip-lookup=true", "--v=4", "--feature-gates=",
               "--enable-network-topology-manager=true", "--leader-elect=false", "--bind-address=0.0.0.0",
               "--secure-port=10259")
    assert kubeflags.diagnosis_addr(ns) == ":10251" and kubeflags.log_level(ns) == logging.DEBUG
    assert ns.leader_elect is False and ns.enable_network_topology_manager is True
    # the secure port is served only with a --tls-cert-file; --bind-address is where it and the services port listen
    assert kubeflags.not_acted_on(ns) == ["--authentication-skip-lookup=true", "--feature-gates=",
                                          "--secure-port=10259"]
    assert kubeflags.services_port(ns) == 10252 and kubeflags.services_port(parse("--services-port=0")) == 0
    assert kubeflags.secure_port(ns) == 10259
    assert parse("--leader-elect").leader_elect is True
    assert kubeflags.diagnosis_addr(parse("--port=0")) == ""
    assert kubeflags.diagnosis_addr(parse("--port=1", "--addr=:2")) == ":2"
    assert kubeflags.diagnosis_addr(parse()) == ":10251" and kubeflags.log_level(parse("-v", "2")) == logging.INFO
    with pytest.raises(SystemExit):
        parse("--leader-elect=maybe")


def test_run_takes_the_scheduler_name_from_the_profile_or_refuses(tmp_path: Path) -> None:
    kubeconfig = str(tmp_path / "none")
    proc = subprocess.run([sys.executable, "-m", "scheduler.cli", "run", "--once", "--kubeconfig", kubeconfig],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "run: no scheduler name" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "cfg.yaml").write_text("apiVersion: kubescheduler.config.k8s.io/v1\n"
                                       "kind: KubeSchedulerConfiguration\nprofiles: [{schedulerName: mine}]\n")
    proc = subprocess.run([sys.executable, "-m", "scheduler.cli", "run", "--once", "--kubeconfig", kubeconfig,
                           "--config", str(tmp_path / "cfg.yaml"), "--feature-gates=", "--v=2"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "no scheduler name" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("not acted on by koord-sched: --feature-gates=") == 1
    assert "leader election" in proc.stderr  # kube-scheduler's default leaderElect is true: said, not ignored

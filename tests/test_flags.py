"""The command line as upstream's koordlet takes it: Go's flag syntax, upstream's 137 flags, gates, and one-line
errors with exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from apis.core.errors import InvalidInput
from koordlet import flagtable, goflag
from koordlet.absent import absent_settings
from koordlet.cli import config_from_args, parse_args, usage
from koordlet.config import FEATURE_GATES, UNIMPLEMENTED_GATES, parse_feature_gates
from koordlet.reference import gate_users

FLAGS_TXT = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "upstream-chart" / "koordlet-flags.txt"
KOORDLET = [sys.executable, "-m", "koordlet"]
# Our defaults that differ from upstream's on purpose (docs/decisions.md).
OWN_DEFAULTS = {"runtime-hooks-nri-backoff-cap": "30s"}


def _flags() -> dict[str, goflag.Flag]:
    return {"addr": goflag.Flag("addr", "string", ":9316"), "b": goflag.Flag("b", "bool", "false"),
            "n": goflag.Flag("n", "int", "1"), "u": goflag.Flag("u", "uint", "0"),
            "d": goflag.Flag("d", "duration", "1s"), "f": goflag.Flag("f", "float64", "2"),
            "m": goflag.Flag("m", "mapStringBool", ""), "s": goflag.Flag("s", "stringSlice", "[]")}


def test_every_upstream_flag_with_its_type_and_default() -> None:
    rows = [line.split("\t") for line in FLAGS_TXT.read_text().splitlines() if line.strip()]
    ours = {o.name: o.flag for o in flagtable.upstream_options()}
    assert len(rows) == 137 and set(ours) == {r[0] for r in rows}
    for name, kind, *default in rows:
        assert ours[name].kind == kind, name
        assert ours[name].default == OWN_DEFAULTS.get(name, default[0] if default else ""), name
        goflag.default_value(ours[name])  # every default parses as its type


@pytest.mark.parametrize(("args", "expected"), [
    (["-addr=:1"], {"addr": ":1"}), (["--addr", ":2"], {"addr": ":2"}), (["-addr", "-b"], {"addr": "-b"}),
    (["-b"], {"b": True}), (["--b=false"], {"b": False}), (["-b=T"], {"b": True}), (["-b=0"], {"b": False}),
    (["-n=0x10"], {"n": 16}), (["-n", "010"], {"n": 8}), (["-n=0b11"], {"n": 3}), (["-n=-5"], {"n": -5}),
    (["-n=1_000"], None), (["-n=0x_1F"], {"n": 31}), (["-u=-1"], None), (["-n=9223372036854775808"], None),
    (["-d=1m30s"], {"d": 90.0}), (["-d=500ms"], {"d": 0.5}), (["-d=1x"], None),
    (["-f=1e3"], {"f": 1000.0}), (["-f=abc"], None),
    (["-m=A=true, B = false,,"], {"m": {"A": True, "B": False}}), (["-m=A"], None),
    (["-m=A=true", "-m=B=false"], {"m": {"A": True, "B": False}}),
    (["-s=a,b", "-s=c"], {"s": ["a", "b", "c"]}),
    (["-b=yes"], None), (["-nope"], None), (["---addr=x"], None), (["-addr"], None),
])
def test_go_flag_syntax(args: list[str], expected: dict[str, object] | None) -> None:
    if expected is None:
        with pytest.raises(goflag.FlagError):
            goflag.parse(_flags(), args)
        return
    parsed = goflag.parse(_flags(), args)
    for k, v in expected.items():
        assert parsed.values[k] == v
    assert set(parsed.given) == set(expected)


def test_parsing_stops_at_the_first_non_flag_and_at_double_dash() -> None:
    assert goflag.parse(_flags(), ["-b", "x", "-n=2"]).rest == ["x", "-n=2"]
    parsed = goflag.parse(_flags(), ["-n=3", "--", "-b"])
    assert parsed.values["n"] == 3 and parsed.rest == ["-b"] and not parsed.values["b"]
    assert goflag.parse(_flags(), ["-h"]).help and goflag.parse(_flags(), ["--help"]).help


def test_the_charts_args_without_a_command_run_the_agent() -> None:
    args = ["-addr=:9316", "-cgroup-root-dir=/host-cgroup/",
            "-feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true",
            "-runtime-hooks-host-endpoint=/var/run/koordlet/koordlet.sock", "--logtostderr=true", "--v=4"]
    ns = parse_args(args)
    assert ns.command == "run" and ns.verbosity == 4 and ns.logtostderr is True
    assert ns.cgroup_root == "/host-cgroup/"
    cfg = config_from_args(ns, env={"NODE_NAME": "n1"}, isdir=lambda _: True)
    assert cfg.gate("BECPUEvict") and cfg.gate("Accelerators") and cfg.gate("BECPUSuppress")
    assert cfg.node_name == "n1" and cfg.listen == ("0.0.0.0", 9316)
    said = {(k, n) for k, n, _ in absent_settings(ns.given, cfg.feature_gates)}
    assert ("flag", "runtime-hooks-host-endpoint") in said
    assert not {("flag", n) for n in ("addr", "cgroup-root-dir", "feature-gates", "logtostderr", "v")} & said


def test_a_flag_not_given_keeps_its_fallback_value() -> None:
    ns = parse_args(["nodemetric"])
    assert ns.cgroup_root is None and ns.pods_dir is None and ns.window == 10.0 and ns.output == "json"
    assert parse_args(["nodemetric", "-o", "yaml", "--window=2"]).output == "yaml"


def test_feature_gates_as_upstream() -> None:
    assert parse_feature_gates({}) == FEATURE_GATES
    gates = parse_feature_gates({"AllAlpha": True, "PSICollector": False})
    assert gates["BEMemoryEvict"] and gates["CPICollector"] and not gates["PSICollector"]
    assert not parse_feature_gates({"AllBeta": False})["BECPUSuppress"]
    with pytest.raises(InvalidInput, match="unrecognized feature gate: Nope"):
        parse_feature_gates({"Nope": True})


def test_unimplemented_gates_are_exactly_the_unread_ones() -> None:
    users = gate_users()
    for gate in FEATURE_GATES:
        assert (gate in UNIMPLEMENTED_GATES) == (not users[gate]), gate
    assert set(UNIMPLEMENTED_GATES) <= set(FEATURE_GATES)


def test_each_commands_help_lists_only_its_own_options() -> None:
    devices = usage("devices")
    assert "-nvml-snapshot" in devices and "-dump-nvml" in devices and "-output" in devices
    for other in ("-addr", "-runtime-hooks-addr", "-window", "-tsdb-path", "-pods-dir"):
        assert f"{other} " not in devices and f"{other}\n" not in devices
    run = usage("run")
    assert "-tsdb-path string" in run and "accepted;" in run and "(default \":9316\")" in run
    assert "  -window " not in run and "  -once" not in run


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KOORDLET, *args], capture_output=True, text=True, timeout=timeout)


def test_version_and_help() -> None:
    for args in (["--version"], ["-version"], ["version"]):
        out = _run(*args)
        assert out.returncode == 0 and out.stdout.startswith("koordlet "), args
    out = _run("plan", "-h")
    assert out.returncode == 0 and "-output" in out.stdout and "-reconcile-interval-seconds" in out.stdout


@pytest.fixture
def busy_port() -> object:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_command_line_mistakes_are_one_line_and_exit_2(tmp_path: Path, busy_port: int) -> None:
    pods = tmp_path / "pods"
    pods.mkdir()
    bad_kubeconfig = tmp_path / "kubeconfig"
    bad_kubeconfig.write_text("clusters: [\n")
    base = ["--host-root", "/", "--node-name", "n1"]
    cases = {
        "flag provided but not defined: -bogus": ["-bogus"],
        "invalid value ':99999' for flag -addr": ["--addr", ":99999"],
        "invalid value '3x' for flag -kubelet-sync-interval": ["-kubelet-sync-interval=3x"],
        "unrecognized feature gate: Nope": ["-feature-gates=Nope=true", *base, "--pods-dir", str(pods)],
        "--kubeconfig /nope: no such file": ["--kubeconfig", "/nope", *base],
        f"kubeconfig {bad_kubeconfig}: while parsing": ["--kubeconfig", str(bad_kubeconfig), *base],
        f"kubeconfig {bad_kubeconfig}: while parsing ": ["nodemetric", "--kubeconfig", str(bad_kubeconfig), *base],
        "--pods-dir /nope: no such directory": ["nodemetric", "--pods-dir", "/nope", *base],
        "--nodeslo /nope.yaml: no such file": ["plan", "--nodeslo", "/nope.yaml", *base, "--pods-dir", str(pods)],
        "--nvml-snapshot /nope.json: no such file": ["devices", "--nvml-snapshot", "/nope.json", "--host-root", "/"],
        "invalid value '-3' for flag -window": ["nodemetric", "--window", "-3", *base],
        "unknown command 'bogus'": ["bogus"],
        "unexpected argument 'extra'": ["-addr=:1", "extra"],
        "address already in use": ["--addr", f"127.0.0.1:{busy_port}", *base, "--pods-dir", str(pods)],
        "give --once": ["qos", *base, "--pods-dir", str(pods)],
    }
    for needle, args in cases.items():
        out = _run(*args)
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert out.returncode == 2, (args, out.stderr)
        assert out.stdout == "", args
        errors = [line for line in lines if needle.lower() in line.lower()]
        assert errors and "Traceback" not in out.stderr, (needle, out.stderr)
        assert len([line for line in lines if " E " in line or line.startswith("koordlet:")]) == 1, out.stderr

"""Host roots off the DaemonSet: missing `/host-*` defaults fall back to the host's paths, else a clear error.

The candidate roots are tmp dirs injected in place of upstream's tables, so nothing depends on this machine.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from koordlet.cli import config_from_args, main, parse_args
from koordlet.host.paths import ROOT_FLAGS, HostRootMissing, resolve_roots


def _tables(tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(DaemonSet defaults, host defaults) as distinct tmp paths, none created yet."""
    ds = {k: str(tmp_path / "ds" / k) + "/" for k in ROOT_FLAGS}
    host = {k: str(tmp_path / "host" / k) + "/" for k in ROOT_FLAGS}
    return ds, host


def _mk(*paths: str) -> None:
    for p in paths:
        Path(p).mkdir(parents=True, exist_ok=True)


def test_existing_defaults_are_kept(tmp_path: Path) -> None:
    ds, host = _tables(tmp_path)
    _mk(*ds.values(), *host.values())
    paths, notes = resolve_roots({}, env={}, required=set(ROOT_FLAGS), ds_defaults=ds, host_defaults=host)
    assert notes == []
    assert vars(paths) == ds


def test_missing_default_falls_back_to_the_host_path_with_one_note_per_root(tmp_path: Path) -> None:
    ds, host = _tables(tmp_path)
    _mk(ds["proc_root"], host["cgroup_root"], host["sys_root"])
    paths, notes = resolve_roots({}, env={}, required={"cgroup_root", "proc_root"}, ds_defaults=ds,
                                 host_defaults=host)
    assert paths.cgroup_root == host["cgroup_root"] and paths.sys_root == host["sys_root"]
    assert paths.proc_root == ds["proc_root"]  # the default exists: no fallback
    assert paths.var_run_root == ds["var_run_root"]  # optional and missing everywhere: default kept, no error
    assert len(notes) == 2
    [cg] = [n for n in notes if n.startswith("--cgroup-root-dir:")]
    assert ds["cgroup_root"] in cg and host["cgroup_root"] in cg


def test_required_root_missing_everywhere_names_the_flag(tmp_path: Path) -> None:
    ds, host = _tables(tmp_path)
    _mk(ds["proc_root"])
    with pytest.raises(HostRootMissing) as e:
        resolve_roots({}, env={}, required={"cgroup_root"}, ds_defaults=ds, host_defaults=host)
    assert str(e.value) == (f"--cgroup-root-dir: {ds['cgroup_root']} does not exist and neither does "
                            f"{host['cgroup_root']}; set --cgroup-root-dir")


def test_host_mode_has_no_fallback(tmp_path: Path) -> None:
    ds, host = _tables(tmp_path)
    _mk(*ds.values())  # only the DaemonSet paths exist; hostMode must not use them
    with pytest.raises(HostRootMissing, match=r"^--proc-root-dir: .* does not exist; set --proc-root-dir$"):
        resolve_roots({}, env={"agent_mode": "hostMode"}, required={"proc_root"}, ds_defaults=ds,
                      host_defaults=host)


def test_explicit_flag_that_does_not_exist_is_an_error_even_when_a_fallback_exists(tmp_path: Path) -> None:
    ds, host = _tables(tmp_path)
    _mk(*host.values())
    missing = str(tmp_path / "nope")
    with pytest.raises(HostRootMissing, match=r"^--var-run-root-dir: .*/nope does not exist$"):
        resolve_roots({"var_run_root": missing}, env={}, ds_defaults=ds, host_defaults=host)
    given = str(tmp_path / "given")
    _mk(given)
    paths, notes = resolve_roots({"cgroup_root": given}, env={}, required={"cgroup_root"}, ds_defaults=ds,
                                 host_defaults=host)
    assert paths.cgroup_root == given and not any(n.startswith("--cgroup-root-dir") for n in notes)


def test_host_root_must_exist_but_its_derived_roots_may_not(tmp_path: Path) -> None:
    with pytest.raises(HostRootMissing, match=r"^--host-root: .*/absent does not exist$"):
        resolve_roots({}, host_root=str(tmp_path / "absent"), required={"cgroup_root"})
    node = tmp_path / "node"
    node.mkdir()  # a simulated node with devices only: no sys/fs/cgroup, no proc
    paths, notes = resolve_roots({}, host_root=str(node), required={"cgroup_root", "proc_root"})
    assert paths.cgroup_root == str(node / "sys/fs/cgroup") + "/" and notes == []


def test_config_from_args_logs_each_fallback_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ds, host = _tables(tmp_path)
    _mk(host["cgroup_root"], ds["proc_root"])
    ns = parse_args(["run", "--pods-dir", str(tmp_path)])
    with caplog.at_level(logging.INFO):
        cfg = config_from_args(ns, env={"NODE_NAME": "n"}, ds_defaults=ds, host_defaults=host)
    assert cfg.paths.cgroup_root == host["cgroup_root"]
    lines = [r.getMessage() for r in caplog.records if "--cgroup-root-dir" in r.getMessage()]
    assert len(lines) == 1


def test_required_roots_depend_on_the_command(tmp_path: Path) -> None:
    ds, host = _tables(tmp_path)
    _mk(ds["sys_root"])  # no cgroup root anywhere, but /sys is there
    devices = parse_args(["devices"])
    assert config_from_args(devices, env={}, ds_defaults=ds, host_defaults=host).paths.sys_root == ds["sys_root"]
    run = parse_args(["run", "--pods-dir", str(tmp_path)])
    with pytest.raises(HostRootMissing, match="--cgroup-root-dir"):
        config_from_args(run, env={}, ds_defaults=ds, host_defaults=host)


def test_main_exits_2_naming_the_flag(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = str(tmp_path / "no-cgroup")
    with caplog.at_level(logging.ERROR):
        rc = main(["nodemetric", "--host-root", "/", "--cgroup-root-dir", missing, "--window", "0"])
    assert rc == 2
    assert any(r.getMessage() == f"--cgroup-root-dir: {missing} does not exist" for r in caplog.records)

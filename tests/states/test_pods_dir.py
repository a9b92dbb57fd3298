"""Standalone pod source: only changed manifests are parsed again, and an unchanged list keeps downstream caches."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from apis.core.errors import KoordletError
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.states.pods import PodsDirSource, PodState

from simhost import make_pod

UID_A = "11111111-2222-3333-4444-555555555555"
UID_B = "66666666-7777-8888-9999-000000000000"


def _write(path: Path, obj: object) -> None:
    path.write_text(yaml.safe_dump(obj))


def _bump_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_an_unchanged_dir_returns_the_same_list_and_parses_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "a.yaml", make_pod("a", UID_A))
    _write(tmp_path / "b.yaml", make_pod("b", UID_B))
    source = PodsDirSource(str(tmp_path), Health())
    first = source.list_pods()
    assert [p["metadata"]["name"] for p in first] == ["a", "b"]
    parsed: list[str] = []
    real_parse = source._parse
    monkeypatch.setattr(source, "_parse", lambda path: parsed.append(path) or real_parse(path))
    assert source.list_pods() is first
    assert parsed == []

    changed = make_pod("b", UID_B, labels={"koordinator.sh/qosClass": "BE"})
    _write(tmp_path / "b.yaml", changed)
    _bump_mtime(tmp_path / "b.yaml")
    second = source.list_pods()
    assert parsed == [str(tmp_path / "b.yaml")]  # only the changed file
    assert second is not first
    assert second[1]["metadata"]["labels"] == {"koordinator.sh/qosClass": "BE"}
    assert second[0] is first[0]  # the unchanged file's pod object is reused

    (tmp_path / "a.yaml").unlink()
    assert [p["metadata"]["name"] for p in source.list_pods()] == ["b"]


def test_a_broken_manifest_is_skipped_and_recovers(tmp_path: Path) -> None:
    health = Health()
    _write(tmp_path / "a.yaml", make_pod("a", UID_A))
    (tmp_path / "b.yaml").write_text("{{{ not yaml")
    source = PodsDirSource(str(tmp_path), health)
    assert [p["metadata"]["name"] for p in source.list_pods()] == ["a"]
    assert health.skipped[("manifest", "unparsable")] == 1
    source.list_pods()
    assert health.skipped[("manifest", "unparsable")] == 1  # unchanged broken file: not parsed (or counted) again
    _write(tmp_path / "b.yaml", make_pod("b", UID_B))
    _bump_mtime(tmp_path / "b.yaml")
    assert [p["metadata"]["name"] for p in source.list_pods()] == ["a", "b"]


def test_dot_files_are_editor_temps_not_pods(tmp_path: Path) -> None:
    _write(tmp_path / "a.yaml", make_pod("a", UID_A))
    _write(tmp_path / ".a.yaml", make_pod("a-draft", UID_B))
    assert [p["metadata"]["name"] for p in PodsDirSource(str(tmp_path), Health()).list_pods()] == ["a"]


def test_a_missing_dir_is_a_source_failure(tmp_path: Path) -> None:
    with pytest.raises(KoordletError, match="not readable"):
        PodsDirSource(str(tmp_path / "absent"), Health()).list_pods()


def test_pod_state_keeps_its_list_while_pods_are_equal() -> None:
    state = PodState(CgroupDriver.CGROUPFS, Health())
    raw = [make_pod("a", UID_A), make_pod("b", UID_B)]
    assert state.update(raw)
    pods = state.pods
    assert not state.update(raw)  # the same list object from the source
    assert not state.update(copy.deepcopy(raw))  # equal pods, e.g. from kubelet
    assert state.pods is pods

    annotated = copy.deepcopy(raw)
    annotated[0]["metadata"]["annotations"] = {"node.koordinator.sh/resctrl": '{"llc": {}}'}
    assert state.update(annotated)  # an annotation drives QoS: it is a change
    assert state.pods is not pods
    assert state.pods[0].raw["metadata"]["annotations"]

    fewer = annotated[:1]
    assert state.update(fewer)
    assert [p.name for p in state.pods] == ["a"]


def test_a_new_cgroup_driver_rebuilds_the_pod_dirs() -> None:
    state = PodState(CgroupDriver.CGROUPFS, Health())
    raw = [make_pod("a", UID_A)]
    state.update(raw)
    before = state.pods[0].cgroup_dir
    state.set_driver(CgroupDriver.SYSTEMD)
    assert state.update(raw)  # same list object, but every dir moves
    assert state.pods[0].cgroup_dir != before
    assert "kubepods.slice" in state.pods[0].cgroup_dir


def test_a_second_pod_with_a_taken_uid_is_skipped() -> None:
    """Every per-pod cache (cgroup dirs, resctrl groups, series) is keyed by UID: one UID, one pod."""
    health = Health()
    state = PodState(CgroupDriver.CGROUPFS, health)
    state.update([make_pod("a", UID_A), make_pod("copy-of-a", UID_A), make_pod("b", UID_B)])
    assert [p.name for p in state.pods] == ["a", "b"]
    assert health.skipped[("pod", "duplicate-uid")] == 1

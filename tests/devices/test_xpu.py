"""xPU device-info files: Go decoding, a bad file keeps its last good content, upstream Device entries."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from koordlet.devices.model import DeviceSet
from koordlet.devices.report import compose, desired
from koordlet.devices.xpu import DeviceInfoFiles, build, decode_device_infos, device_infos_dir, read_device_infos
from koordlet.health import Health
from koordlet.host.paths import HostPaths

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nodes"
CRD = "scheduling.koordinator.sh_devices.yaml"
HEALTHY = {"type": "Healthy", "status": "True", "reason": "DeviceHealthy", "message": "device is healthy"}


def _dir(tmp_path: Path) -> tuple[HostPaths, Path]:
    paths = HostPaths.under(str(tmp_path))
    d = Path(device_infos_dir(paths))
    d.mkdir(parents=True)
    return paths, d


def _npu(minor: int, peers: str | None = None, **extra: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"vendor": "huawei", "model": "Ascend-910B3", "uuid": f"npu-{minor}-{minor}",
                            "minor": str(minor), "resources": {"koordinator.sh/gpu-memory": "65536Mi"},
                            "topology": {"socketID": "-1", "nodeID": "0", "pcieID": "pci0000:00",
                                         "busID": f"0000:{minor + 1:02x}:00.0"},
                            "status": {"healthy": True}}
    if peers is not None:
        info["topology"]["p2pLinks"] = [{"peerMinor": peers, "type": "HCCS"}]
    info.update(extra)
    return info


def _device(entries: list[dict[str, Any]], labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    meta = {"name": "node-1", "labels": labels, "annotations": annotations}
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": meta,
            "spec": {"devices": [{**e, "conditions": [{**c, "lastTransitionTime": "2026-11-22T10:00:00Z"}
                                                      for c in e.get("conditions", [])]} for e in entries]}}


# --- reading ---------------------------------------------------------------------------------------------------

def test_files_concatenated_in_name_order(tmp_path: Path) -> None:
    paths, d = _dir(tmp_path)
    (d / "b-second").write_text(json.dumps([_npu(1)]))
    (d / "a-first").write_text(json.dumps([_npu(0), _npu(2)]))
    (d / "c-empty").write_text("[]")
    (d / "d-null").write_text("null")
    (d / ".ic-device.tmp1234").write_text("{half")  # an atomic writer's temp file
    (d / "subdir").mkdir()
    infos = read_device_infos(paths, Health())
    assert infos is not None and [i["uuid"] for i in infos] == ["npu-0-0", "npu-2-2", "npu-1-1"]


def test_missing_dir_means_no_xpus(tmp_path: Path) -> None:
    health = Health()
    assert read_device_infos(HostPaths.under(str(tmp_path)), health) == []
    assert not health.skipped


def test_directory_override_and_unreadable_directory(tmp_path: Path) -> None:
    paths = HostPaths.under(str(tmp_path / "host"))
    other = tmp_path / "device-infos"
    other.mkdir()
    (other / "ic-device").write_text(json.dumps([_npu(0)]))
    files = DeviceInfoFiles(paths, Health(), str(other))
    assert [i["uuid"] for i in files.read()] == ["npu-0-0"]
    health = Health()
    assert read_device_infos(paths, health, str(other / "ic-device")) == []  # not a directory
    assert health.skipped[("xpu-device-info", "unreadable")] == 1
    (other / "ic-device").rename(tmp_path / "ic-device")
    other.rmdir()
    (tmp_path / "ic-device").rename(other)  # the directory is now a file: unreadable, the last files' entries stay
    assert [i["uuid"] for i in files.read()] == ["npu-0-0"]
    assert files.health.skipped[("xpu-device-info", "unreadable")] == 1


def test_go_decoding_rules() -> None:
    [info] = decode_device_infos(b' [{"UUID": "u", "Minor": "3", "extra": 1, "topology": {"p2pLinks": []},'
                                 b' "status": {}}] trailing garbage Go never reads')
    assert info == {"vendor": "", "model": "", "uuid": "u", "minor": "3", "resources": None,
                    "topology": {"p2pLinks": [], "mustHonorPartition": False, "socketID": "", "nodeID": "",
                                 "pcieID": "", "busID": ""},
                    "status": {"healthy": False, "errCode": "", "errMessage": ""}}
    assert decode_device_infos(b"[null]") == [] and decode_device_infos(b"null") == []


BAD_CONTENTS = [
    b"", b"{half", b"\xff\xfe garbage", b'{"uuid": "npu-0-0"}', b'"a string"',
    b'[{"uuid": 5}]', b'[{"minor": 0}]', b'[{"resources": ["koordinator.sh/gpu-core"]}]',
    b'[{"resources": {"koordinator.sh/gpu-core": 100}}]', b'[{"topology": "HCCS"}]',
    b'[{"topology": {"p2pLinks": {"peerMinor": "1"}}}]', b'[{"topology": {"mustHonorPartition": "yes"}}]',
    b'[{"status": {"healthy": "true"}}]', b'[42]', b"[" * 200000 + b"]" * 200000, b"[" + b"9" * 5000 + b"]",
]


def _uuids(infos: list[dict[str, Any]]) -> list[str]:
    return [i["uuid"] for i in infos]


@pytest.mark.parametrize("content", BAD_CONTENTS)
def test_file_bad_from_the_start_hides_only_itself(tmp_path: Path, content: bytes,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    paths, d = _dir(tmp_path)
    (d / "a-good").write_text(json.dumps([_npu(0)]))
    (d / "ic-device").write_bytes(content)
    (d / "z-good").write_text(json.dumps([_npu(2)]))
    health = Health()
    files = DeviceInfoFiles(paths, health)
    with caplog.at_level(logging.WARNING):
        assert _uuids(files.read()) == ["npu-0-0", "npu-2-2"]
        assert _uuids(files.read()) == ["npu-0-0", "npu-2-2"]
    assert health.skipped[("xpu-device-info", "malformed")] == 2  # counted every round
    assert len([r for r in caplog.records if "ic-device" in r.getMessage()]) == 1  # two failed rounds, one log
    (d / "ic-device").write_text(json.dumps([_npu(1)]))
    assert _uuids(files.read()) == ["npu-0-0", "npu-1-1", "npu-2-2"]


def test_file_that_turns_bad_keeps_its_last_good_devices(tmp_path: Path) -> None:
    paths, d = _dir(tmp_path)
    (d / "ascend").write_text(json.dumps([_npu(0), _npu(1)]))
    (d / "mlu").write_text(json.dumps([_npu(4)]))
    health = Health()
    files = DeviceInfoFiles(paths, health)
    first = files.read()
    assert _uuids(first) == ["npu-0-0", "npu-1-1", "npu-4-4"]
    (d / "ascend").write_text('[{"uuid": "npu-0-0", "min')  # a non-atomic writer caught half-way
    (d / "mlu").write_text(json.dumps([_npu(5)]))  # the good file's change still shows
    assert _uuids(files.read()) == ["npu-0-0", "npu-1-1", "npu-5-5"]
    assert files.read()[:2] == first[:2]  # the last good content, not a re-decode of the half file
    (d / "ascend").write_text(json.dumps([_npu(0)]))
    assert _uuids(files.read()) == ["npu-0-0", "npu-5-5"]
    (d / "ascend").write_text("{")
    assert _uuids(files.read()) == ["npu-0-0", "npu-5-5"]  # the last good is the newest good, not the first
    assert health.skipped[("xpu-device-info", "malformed")] == 3


def test_file_that_disappears_drops_its_devices(tmp_path: Path) -> None:
    paths, d = _dir(tmp_path)
    (d / "ascend").write_text(json.dumps([_npu(0)]))
    (d / "mlu").write_text(json.dumps([_npu(4)]))
    files = DeviceInfoFiles(paths, Health())
    assert _uuids(files.read()) == ["npu-0-0", "npu-4-4"]
    (d / "ascend").write_text("{")
    assert _uuids(files.read()) == ["npu-0-0", "npu-4-4"]
    (d / "ascend").unlink()  # removed while bad: its kept content goes too
    assert _uuids(files.read()) == ["npu-4-4"]
    (d / "ascend").write_text("{")  # back, still bad: nothing is remembered of the old one
    assert _uuids(files.read()) == ["npu-4-4"]
    for f in d.iterdir():
        f.unlink()
    d.rmdir()
    assert files.read() == []


def test_unreadable_file_and_recovery_logs_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths, d = _dir(tmp_path)
    (d / "ic-device").symlink_to(tmp_path / "gone")  # open() fails even as root
    health = Health()
    files = DeviceInfoFiles(paths, health)
    with caplog.at_level(logging.WARNING):
        assert files.read() == []
        (d / "ic-device").unlink()
        (d / "ic-device").write_text("[")
        assert files.read() == []
        (d / "ic-device").write_text(json.dumps([_npu(0)]))
        assert _uuids(files.read()) == ["npu-0-0"]
        (d / "ic-device").write_text("[")
        assert _uuids(files.read()) == ["npu-0-0"]
    assert health.skipped[("xpu-device-info", "unreadable")] == 1
    assert health.skipped[("xpu-device-info", "malformed")] == 2
    assert len(caplog.records) == 3  # the recovered file logs its next failure again


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    paths, d = _dir(tmp_path)
    (d / "ic-device").write_text("[" + " " * (4 << 20) + "]")
    health = Health()
    assert read_device_infos(paths, health) == []
    assert health.skipped[("xpu-device-info", "malformed")] == 1


# --- building --------------------------------------------------------------------------------------------------

def test_entries_follow_upstream_rules() -> None:
    infos = decode_device_infos(json.dumps([
        _npu(1, resources={"gpu-core": "100", "gpu-memory": "16384Mi", "huawei.com/npu-core": "20",
                           "bad": "many", "koordinator.sh/gpu-memory-ratio": "50"},
             status={"healthy": False, "errCode": "chip error", "errMessage": "NPU index 1 has 2 chip faults"}),
        {**_npu(0, status={"healthy": False}), "minor": "not-a-number"},
        {"vendor": "huawei", "model": "Ascend-910B3", "uuid": "npu-9-9", "minor": "99999999999",
         "topology": {"nodeID": "", "socketID": "3"}},
        {"vendor": "huawei", "model": "Ascend-910B3", "uuid": "npu-8-8", "minor": "8",
         "topology": {"nodeID": "x"}, "status": {"healthy": True, "errCode": "ignored"}},
    ]).encode())
    health = Health()
    got = build(infos, health)
    assert got.devices == [
        {"id": "npu-0-0", "minor": 0, "type": "gpu", "health": False,
         "resources": {"koordinator.sh/gpu-memory-ratio": "100", "koordinator.sh/gpu-memory": "64Gi"},
         "topology": {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:00", "busID": "0000:01:00.0"},
         "conditions": [{"type": "Healthy", "status": "False", "reason": "Unknown", "message": "device is unhealthy"}]},
        {"id": "npu-1-1", "minor": 1, "type": "gpu", "health": False,
         "resources": {"koordinator.sh/gpu-memory-ratio": "50", "koordinator.sh/gpu-core": "100",
                       "koordinator.sh/gpu-memory": "16Gi", "huawei.com/npu-core": "20"},
         "topology": {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:00", "busID": "0000:02:00.0"},
         # quirk: `chip error` is not a valid condition reason; the API server would reject the Device
         "conditions": [{"type": "Healthy", "status": "False", "reason": "chip_error",
                         "message": "NPU index 1 has 2 chip faults"}]},
        {"id": "npu-8-8", "minor": 8, "type": "gpu", "health": True,
         "resources": {"koordinator.sh/gpu-memory-ratio": "100"},
         "topology": {"socketID": -1, "nodeID": 0, "pcieID": "", "busID": ""}, "conditions": [HEALTHY]},
        {"id": "npu-9-9", "minor": 2147483647, "type": "gpu", "health": True,  # Go clamps out-of-range ints
         "resources": {"koordinator.sh/gpu-memory-ratio": "100"},
         "topology": {"socketID": -1, "nodeID": -1, "pcieID": "", "busID": ""}},
    ]
    assert got.labels == {"node.koordinator.sh/gpu-model": "Ascend-910B3", "node.koordinator.sh/gpu-vendor": "huawei"}
    assert got.annotations == {}
    assert health.skipped[("xpu-resource", "unparsable")] == 1


def test_hccs_groups_become_partitions_and_policy_labels() -> None:
    """8 NPUs in two HCCS groups of four (doc example of a 910B3 node): one partition per group, deduped."""
    infos = [_npu(m, ",".join(str(p) for p in range(m // 4 * 4, m // 4 * 4 + 4) if p != m)) for m in range(8)]
    got = build(decode_device_infos(json.dumps(infos).encode()))
    assert got.labels["node.koordinator.sh/gpu-partition-policy"] == "Prefer"
    table = json.loads(got.annotations["scheduling.koordinator.sh/gpu-partitions"])
    assert table == {"4": [{"minors": [0, 1, 2, 3], "gpuLinkType": "HCCS", "allocationScore": 1},
                           {"minors": [4, 5, 6, 7], "gpuLinkType": "HCCS", "allocationScore": 1}]}
    honor = [dict(i, topology=dict(i["topology"], mustHonorPartition=True)) for i in infos]
    assert build(decode_device_infos(json.dumps(honor).encode())).labels[
        "node.koordinator.sh/gpu-partition-policy"] == "Honor"


def test_partition_edge_cases() -> None:
    infos = [_npu(0, "1, 2,x"), _npu(1, ""), _npu(2, "0,1"),
             dict(_npu(3), topology={"p2pLinks": [{"peerMinor": "0", "type": ""}]})]
    got = build(decode_device_infos(json.dumps(infos).encode()))
    # `1, 2,x`: only "1" is an integer besides the own minor (Atoi); empty peer or type: invalid link
    assert json.loads(got.annotations["scheduling.koordinator.sh/gpu-partitions"]) == {
        "2": [{"minors": [0, 1], "gpuLinkType": "HCCS", "allocationScore": 1}],
        "3": [{"minors": [0, 1, 2], "gpuLinkType": "HCCS", "allocationScore": 1}]}
    # p2pLinks present but empty on the first device: the policy label without any partition
    empty = build(decode_device_infos(json.dumps([dict(_npu(0), topology={"p2pLinks": []})]).encode()))
    assert empty.labels["node.koordinator.sh/gpu-partition-policy"] == "Prefer" and empty.annotations == {}
    # labels come from the first device as read, not after sorting by uuid
    mixed = build(decode_device_infos(json.dumps([dict(_npu(1), model="B"), dict(_npu(0), model="A")]).encode()))
    assert mixed.labels["node.koordinator.sh/gpu-model"] == "B"
    assert build([]) == DeviceSet()


def test_invalid_label_values_are_left_out() -> None:
    health = Health()
    got = build(decode_device_infos(json.dumps([dict(_npu(0), model="Ascend 910B")]).encode()), health)
    assert got.labels == {"node.koordinator.sh/gpu-vendor": "huawei"}
    assert health.skipped[("xpu-label", "invalid-value")] == 1


def test_unhealthy_device_passes_the_crd(validate_crd: Any) -> None:
    infos = decode_device_infos(json.dumps([
        _npu(0, status={"healthy": False, "errCode": "A4025021 8C03A000 8C084E00", "errMessage": "heart beat lost"}),
        _npu(1, status={"healthy": False, "errCode": "0x80"})]).encode())
    got = build(infos)
    assert [d["conditions"][0]["reason"] for d in got.devices] == ["A4025021_8C03A000_8C084E00", "Unknown"]
    validate_crd(CRD, desired("node-1", "uid", compose(got, None, None), None))


# --- the example nodes -----------------------------------------------------------------------------------------

def _example(name: str) -> DeviceSet:
    paths = HostPaths.under(str(EXAMPLES / name))
    infos = read_device_infos(paths, Health())
    assert infos, f"{name}: no device infos (run examples/nodes/generate.py)"
    return build(infos)


def test_ascend_example_device(validate_crd: Any) -> None:
    got = _example("ascend-910b")
    validate_crd(CRD, _device(got.devices, got.labels, got.annotations))
    validate_crd(CRD, desired("ascend-910b", "uid", compose(got, None, None), None))
    assert got.labels == {"node.koordinator.sh/gpu-model": "Ascend-910B1", "node.koordinator.sh/gpu-vendor": "huawei",
                          "node.koordinator.sh/gpu-partition-policy": "Prefer"}
    assert json.loads(got.annotations["scheduling.koordinator.sh/gpu-partitions"]) == {
        "8": [{"minors": list(range(8)), "gpuLinkType": "HCCS", "allocationScore": 1}]}  # the recorded full mesh
    assert [(d["id"], d["minor"], d["topology"]["busID"], d["topology"]["nodeID"]) for d in got.devices] == [
        (f"npu-{n}-{n}", n, f"0000:{bus}:00.0", numa) for n, bus, numa in
        [(0, "c1", 6), (1, "01", 0), (2, "c2", 6), (3, "02", 0), (4, "81", 4), (5, "41", 2), (6, "82", 4),
         (7, "42", 2)]]
    assert got.devices[0]["resources"] == {"koordinator.sh/gpu-memory-ratio": "100",
                                           "koordinator.sh/gpu-memory": "64Gi", "huawei.com/npu-core": "24",
                                           "huawei.com/npu-dvpp": "100"}
    assert all(d["health"] and d["conditions"] == [HEALTHY] for d in got.devices)


def test_mlu_example_device(validate_crd: Any) -> None:
    got = _example("mlu370")
    validate_crd(CRD, _device(got.devices, got.labels, got.annotations))
    assert got.labels == {"node.koordinator.sh/gpu-model": "MLU370-X8", "node.koordinator.sh/gpu-vendor": "cambricon"}
    assert got.annotations == {}
    assert [(d["minor"], d["topology"], d["resources"]["koordinator.sh/gpu-memory"]) for d in got.devices] == [
        (0, {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:38", "busID": "0000:39:00.0"}, "23374Mi"),
        (1, {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3c", "busID": "0000:3d:00.0"}, "23374Mi")]


def test_decode_errors_are_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        decode_device_infos(b'{"a": 1}')

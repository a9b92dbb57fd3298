"""The device-allocated annotation as koordlet decodes it: a real annotation, Go's JSON rules, errors naming fields."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from apis.extension.device_allocated import (
    ANNOTATION_DEVICE_ALLOCATED,
    DeviceAllocation,
    VirtualFunction,
    decode_device_allocations,
    pod_device_allocations,
)
from apis.extension.errors import AnnotationError

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "vendor-outputs"
if not FIXTURES.is_dir():  # a clone elsewhere: shared/ sits beside the checkout
    FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "vendor-outputs"


def fixture_annotation() -> str:
    """The annotation koord-scheduler wrote for pod-vf01 on k8s-node1 (Koordinator's GPU+RDMA user manual)."""
    path = FIXTURES / "koordinator-pod-annotation.device-allocated.gpu-rdma-vf.k8s-node1.txt"
    if not path.is_file():
        pytest.skip(f"{path} not found (shared/ must sit beside the checkout)")
    value = yaml.safe_load(path.read_text())[ANNOTATION_DEVICE_ALLOCATED]
    assert isinstance(value, str)
    return value


def test_the_annotation_koord_scheduler_wrote() -> None:
    allocs = decode_device_allocations(fixture_annotation())
    assert list(allocs) == ["gpu", "rdma"]
    (gpu,) = allocs["gpu"]
    assert gpu.minor == 0
    assert gpu.value("koordinator.sh/gpu-memory") == 23040 * 2**20
    assert gpu.value("koordinator.sh/gpu-memory-ratio") == 100
    (rdma,) = allocs["rdma"]
    assert rdma == DeviceAllocation(0, {"koordinator.sh/rdma": Decimal(1)}, "", (VirtualFunction(-1, "0000:01:00.2"),))


def test_absent_and_null() -> None:
    assert pod_device_allocations({}) is None
    assert pod_device_allocations({ANNOTATION_DEVICE_ALLOCATED: "null"}) == {}
    assert decode_device_allocations('{"gpu":null}') == {"gpu": ()}
    a = decode_device_allocations('{"gpu":[{"minor":null,"resources":null,"id":null,"extension":null}]}')["gpu"][0]
    assert a == DeviceAllocation(0)
    # a null VF is the zero VF (a struct element), a null allocation is an error (upstream would dereference it)
    vfs = decode_device_allocations('{"rdma":[{"extension":{"vfs":[null]}}]}')["rdma"][0].vfs
    assert vfs == (VirtualFunction(0, ""),)


def test_struct_fields_fold_case_map_keys_do_not() -> None:
    allocs = decode_device_allocations('{"GPU":[{"Minor":3,"ID":"GPU-x","Extension":{"VFs":[{"BusId":"0000:01:00.2"}],'
                                '"GPUSHAREDRESOURCETEMPLATE":"t"}}],"gpu":[]}')
    assert allocs["gpu"] == ()
    (a,) = allocs["GPU"]
    assert (a.minor, a.id, a.vfs, a.gpu_shared_resource_template) == (3, "GPU-x", (VirtualFunction(0, "0000:01:00.2"),),
                                                                       "t")
    # resource names are map keys: case-sensitive; a quantity may be a number
    (b,) = decode_device_allocations(
        '{"gpu":[{"resources":{"koordinator.sh/GPU-core":50,"koordinator.sh/gpu-core":"1.5"}}]}')["gpu"]
    assert b.value("koordinator.sh/GPU-core") == 50
    assert b.value("koordinator.sh/gpu-core") == 2  # Quantity.Value() rounds up
    # a repeated struct field: the last one wins
    assert decode_device_allocations('{"gpu":[{"minor":1,"MINOR":2}]}')["gpu"][0].minor == 2


@pytest.mark.parametrize(("text", "path", "needle"), [
    ("{", "", "invalid JSON"),
    ("[]", "", "must be a JSON object"),
    ('{"gpu":{}}', "gpu", "must be an array"),
    ('{"gpu":[null]}', "gpu[0]", "is null"),
    ('{"gpu":[1]}', "gpu[0]", "must be an object"),
    ('{"gpu":[{"minor":"0"}]}', "gpu[0].minor", "must be an integer"),
    ('{"gpu":[{"minor":1.0}]}', "gpu[0].minor", "must be an integer"),
    ('{"gpu":[{"minor":1e2}]}', "gpu[0].minor", "must be an integer"),
    ('{"gpu":[{"minor":2147483648}]}', "gpu[0].minor", "out of range"),
    ('{"gpu":[{"minor":true}]}', "gpu[0].minor", "must be an integer"),
    ('{"gpu":[{"resources":[]}]}', "gpu[0].resources", "must be an object"),
    ('{"gpu":[{"resources":{"koordinator.sh/gpu-memory":"16Gx"}}]}',
     "gpu[0].resources[koordinator.sh/gpu-memory]", ""),
    ('{"gpu":[{"resources":{"koordinator.sh/gpu-memory":true}}]}',
     "gpu[0].resources[koordinator.sh/gpu-memory]", "must be a quantity"),
    ('{"gpu":[{"id":7}]}', "gpu[0].id", "must be a string"),
    ('{"rdma":[{},{"extension":[]}]}', "rdma[1].extension", "must be an object"),
    ('{"rdma":[{"extension":{"vfs":{}}}]}', "rdma[0].extension.vfs", "must be an array"),
    ('{"rdma":[{"extension":{"vfs":[{"busID":1}]}}]}', "rdma[0].extension.vfs[0].busID", "must be a string"),
    ('{"rdma":[{"extension":{"vfs":[{"minor":"x"}]}}]}', "rdma[0].extension.vfs[0].minor", "must be an integer"),
    ('{"gpu":[{"extension":{"gpuSharedResourceTemplate":1}}]}',
     "gpu[0].extension.gpuSharedResourceTemplate", "must be a string"),
    ('{"gpu":[{"minor":NaN}]}', "", "invalid JSON"),
])
def test_errors_name_the_field(text: str, path: str, needle: str) -> None:
    with pytest.raises(AnnotationError) as e:
        decode_device_allocations(text)
    assert e.value.path == path
    assert needle in e.value.message


def test_unknown_fields_are_ignored() -> None:
    (a,) = decode_device_allocations('{"fpga":[{"minor":1,"whatever":{"x":[1]},"extension":{"other":1}}]}')["fpga"]
    assert a == DeviceAllocation(1)

"""apis.extension.device_allocated: one typed decoder for both programs, the encoder koord-sched writes with."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.extension.device_allocated import (
    DeviceAllocation,
    VirtualFunction,
    decode_device_allocations,
    encode_device_allocations,
    pod_device_allocations,
)
from apis.extension.errors import AnnotationError
from apis.scheduling.device import DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA

# what koord-scheduler wrote for a GPU + RDMA VF pod (Koordinator's GPU & RDMA user manual, shared/fixtures)
UPSTREAM = ('{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"23040Mi",'
            '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},'
            '"extension":{"vfs":[{"minor":-1,"busID":"0000:01:00.2"}]}}]}')


def test_upstream_example_decodes_to_typed_values_and_encodes_back_byte_for_byte() -> None:
    allocs = decode_device_allocations(UPSTREAM)
    (gpu,) = allocs[DEVICE_TYPE_GPU]
    assert gpu.minor == 0 and gpu.resources["koordinator.sh/gpu-memory"] == Decimal(23040 << 20)
    assert allocs[DEVICE_TYPE_RDMA] == (DeviceAllocation(0, {"koordinator.sh/rdma": Decimal(1)}, "",
                                                         (VirtualFunction(-1, "0000:01:00.2"),)),)
    assert encode_device_allocations(allocs) == UPSTREAM
    assert pod_device_allocations({}) is None


_ALLOCATION = st.builds(
    DeviceAllocation,
    st.integers(0, 15),
    st.dictionaries(st.sampled_from(["koordinator.sh/gpu-core", "koordinator.sh/gpu-memory", "koordinator.sh/rdma"]),
                    st.integers(0, 1 << 40).map(Decimal)),
    st.sampled_from(["", "GPU-6f0e2c1a", "0000:01:00.0"]),
    st.lists(st.builds(VirtualFunction, st.integers(-1, 64), st.sampled_from(["", "0000:01:00.2"])), max_size=2)
    .map(tuple),
    st.sampled_from(["", "vir05_1c_16g"]))


@given(st.dictionaries(st.sampled_from(["gpu", "rdma", "fpga"]), st.lists(_ALLOCATION, max_size=3).map(tuple)))
def test_what_the_encoder_writes_decodes_to_the_same_allocations(allocs: dict[str, tuple[DeviceAllocation, ...]]
                                                                 ) -> None:
    assert decode_device_allocations(encode_device_allocations(allocs)) == allocs


@pytest.mark.parametrize(("text", "path"), [
    ("{", ""),
    ("[]", ""),
    ('{"gpu": {}}', "gpu"),
    ('{"gpu": [null]}', "gpu[0]"),
    ('{"gpu": [{"minor": 1.5}]}', "gpu[0].minor"),
    ('{"gpu": [{"resources": {"koordinator.sh/gpu-core": "lots"}}]}', "gpu[0].resources[koordinator.sh/gpu-core]"),
    ('{"rdma": [{"extension": {"vfs": [{"busID": 1}]}}]}', "rdma[0].extension.vfs[0].busID"),
])
def test_malformed_input_is_one_typed_error_naming_the_field(text: str, path: str) -> None:
    with pytest.raises(AnnotationError) as e:
        decode_device_allocations(text)
    assert e.value.path == path

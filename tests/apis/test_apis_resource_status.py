"""apis.extension.resource_status: the CPU list text, the annotation's decoder and the encoder koord-sched writes."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.extension.errors import AnnotationError
from apis.extension.resource_status import (
    ANNOTATION_RESOURCE_STATUS,
    CPUSetError,
    NUMANodeResource,
    ResourceStatus,
    decode_resource_status,
    encode_resource_status,
    format_cpuset,
    parse_cpuset,
    resource_status,
)

# upstream apis/extension/numa_aware.go ResourceStatus as koord-scheduler writes it (Go field names, omitempty)
UPSTREAM = '{"cpuset":"0-3","numaNodeResources":[{"node":0,"resources":{"cpu":"4","memory":"8Gi"}}]}'


def test_upstream_example_decodes_to_typed_values() -> None:
    status = resource_status({ANNOTATION_RESOURCE_STATUS: UPSTREAM})
    assert status == ResourceStatus("0-3", (NUMANodeResource(0, {"cpu": Decimal(4), "memory": Decimal(8 << 30)}),))
    assert status.cpus() == [0, 1, 2, 3] and status.numa_aware()
    assert resource_status({}) == ResourceStatus()


@given(st.frozensets(st.integers(0, 255)),
       st.dictionaries(st.integers(0, 7), st.fixed_dictionaries({"cpu": st.integers(0, 64_000),
                                                                  "memory": st.integers(0, 1 << 40)})))
def test_what_the_encoder_writes_decodes_to_the_same_cpus_and_quantities(cpus: frozenset[int],
                                                                         numa: dict[int, dict[str, int]]) -> None:
    status = decode_resource_status(encode_resource_status(cpus, numa))
    assert status.cpus() == sorted(cpus)
    want = {n: {r: v for r, v in res.items() if v} for n, res in numa.items()}
    got = {n.node: {r: int(q * 1000) if r == "cpu" else int(q) for r, q in n.resources.items()}
           for n in status.numa_node_resources}
    assert got == {n: res for n, res in want.items() if res}


def test_nothing_is_an_empty_object() -> None:
    assert encode_resource_status([], {0: {"cpu": 0}}) == "{}"


@pytest.mark.parametrize(("text", "path"), [
    ("not json", ""),
    ("[]", ""),
    ('{"cpuset": 5}', "cpuset"),
    ('{"cpuset": "0-"}', "cpuset"),
    ('{"numaNodeResources": {}}', "numaNodeResources"),
    ('{"numaNodeResources": [{"node": 1.5}]}', "numaNodeResources[0].node"),
    ('{"numaNodeResources": [{"node": 0, "resources": {"cpu": "lots"}}]}', "numaNodeResources[0].resources[cpu]"),
])
def test_malformed_input_is_one_typed_error_naming_the_field(text: str, path: str) -> None:
    with pytest.raises(AnnotationError) as e:
        decode_resource_status(text)
    assert e.value.path == path


def test_cpu_lists_round_trip_and_reject_garbage() -> None:
    assert format_cpuset(parse_cpuset("8,0-3,2")) == "0-3,8"
    with pytest.raises(CPUSetError):
        parse_cpuset("0,,1")

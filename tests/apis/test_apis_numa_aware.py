"""apis.extension.numa_aware: the cpu-topology annotation koordlet writes and koord-sched reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.extension.errors import AnnotationError
from apis.extension.numa_aware import CPUInfo, cpu_topology_json, decode_cpu_topology

_CPU = st.builds(CPUInfo, st.integers(0, 4095), st.integers(0, 2047), st.integers(0, 7), st.integers(0, 15))


@given(st.lists(_CPU, max_size=8).map(tuple))
def test_what_koordlet_writes_koord_sched_reads_back(cpus: tuple[CPUInfo, ...]) -> None:
    assert decode_cpu_topology(json.dumps(cpu_topology_json(cpus))) == cpus


def test_upstream_shape_keys_fold_and_null_is_zero() -> None:
    # apis/extension/numa_aware.go CPUTopology{Detail []CPUInfo}, as koordlet reports it
    text = '{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"ID":1,"Core":0,"socket":null,"node":0}]}'
    assert decode_cpu_topology(text) == (CPUInfo(0, 0, 0, 0), CPUInfo(1, 0, 0, 0))
    assert decode_cpu_topology("{}") == decode_cpu_topology("null") == ()


@pytest.mark.parametrize(("text", "path"), [
    ("{", ""), ("[]", ""), ('{"detail": {}}', "detail"), ('{"detail": [1]}', "detail[0]"),
    ('{"detail": [{"id": "1"}]}', "detail[0].id"), ('{"detail": [{"node": 1.5}]}', "detail[0].node"),
])
def test_malformed_input_is_one_typed_error_naming_the_field(text: str, path: str) -> None:
    with pytest.raises(AnnotationError) as e:
        decode_cpu_topology(text)
    assert e.value.path == path

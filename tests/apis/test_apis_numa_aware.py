"""apis.extension.numa_aware: the cpu-topology annotation koordlet writes and koord-sched reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.extension.errors import AnnotationError
from apis.extension.numa_aware import (
    CPUInfo,
    KubeletCPUManagerPolicy,
    cpu_topology_json,
    decode_cpu_topology,
    decode_kubelet_cpu_manager_policy,
)

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


_POLICY = st.builds(KubeletCPUManagerPolicy, st.sampled_from(["", "none", "static"]),
                    st.dictionaries(st.sampled_from(["full-pcpus-only", "distribute-cpus-across-numa"]),
                                    st.sampled_from(["true", "false"])),
                    st.sampled_from(["", "0", "0-1", "0,4-5"]))


@given(_POLICY)
def test_the_kubelet_policy_koordlet_writes_koord_sched_reads_back(policy: KubeletCPUManagerPolicy) -> None:
    assert decode_kubelet_cpu_manager_policy(json.dumps(policy.to_json())) == policy


def test_kubelet_policy_is_encoded_as_json_marshal_writes_it() -> None:
    # apis/extension/numa_aware.go KubeletCPUManagerPolicy: struct field order, omitempty, map keys sorted
    policy = KubeletCPUManagerPolicy("static", {"z": "1", "full-pcpus-only": "true"}, "0-1")
    assert json.dumps(policy.to_json(), separators=(",", ":")) == (
        '{"policy":"static","options":{"full-pcpus-only":"true","z":"1"},"reservedCPUs":"0-1"}')
    assert KubeletCPUManagerPolicy().to_json() == {}


def test_kubelet_policy_keys_fold_and_null_is_zero() -> None:
    text = '{"Policy": "static", "OPTIONS": {"a": null}, "reservedcpus": null}'
    assert decode_kubelet_cpu_manager_policy(text) == KubeletCPUManagerPolicy("static", {"a": ""}, "")
    assert decode_kubelet_cpu_manager_policy("null") == decode_kubelet_cpu_manager_policy("{}")


@pytest.mark.parametrize(("text", "path"), [
    ("{", ""), ("[]", ""), ('{"policy": 1}', "policy"), ('{"options": []}', "options"),
    ('{"options": {"full-pcpus-only": true}}', "options.full-pcpus-only"), ('{"reservedCPUs": 0}', "reservedCPUs"),
])
def test_malformed_kubelet_policy_is_one_typed_error_naming_the_field(text: str, path: str) -> None:
    with pytest.raises(AnnotationError) as e:
        decode_kubelet_cpu_manager_policy(text)
    assert e.value.path == path

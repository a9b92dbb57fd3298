"""apis.extension.node: the node.koordinator.sh/reservation annotation, decoded once for the agent and koord-sched."""

from __future__ import annotations

import json

import pytest

from apis.extension.errors import AnnotationError
from apis.extension.node import (
    APPLY_POLICY_RESERVED_CPUS_ONLY,
    NodeReservation,
    decode_node_raw_allocatable,
    decode_node_reservation,
    reserved_cpu_count,
    reserved_cpu_list,
)


def test_upstream_examples() -> None:
    # apis/extension/node_reservation.go's doc comment, and a full NodeReservation
    assert decode_node_reservation('{"reservedCPUs":"0-5"}') == NodeReservation({}, "0-5", "")
    text = '{"resources":{"cpu":"1","memory":"2Gi"},"reservedCPUs":"1-6","applyPolicy":"ReservedCPUsOnly"}'
    assert decode_node_reservation(text) == NodeReservation({"cpu": "1", "memory": "2Gi"}, "1-6",
                                                            APPLY_POLICY_RESERVED_CPUS_ONLY)


def test_field_names_fold_null_is_zero_and_numbers_are_quantities() -> None:
    r = decode_node_reservation('{"RESOURCES": {"cpu": 2, "memory": null}, "ReservedCpus": null, "applypolicy": "x"}')
    assert r == NodeReservation({"cpu": "2", "memory": "0"}, "", "x")
    assert decode_node_reservation('{"resources": {"cpu": 1.5e0}}').resources == {"cpu": "1.5e0"}
    # a later spelling of the same field overwrites an earlier one, as json.Unmarshal does
    assert decode_node_reservation('{"reservedCPUs": "0", "reservedcpus": "1"}').reserved_cpus == "1"
    assert decode_node_reservation("") == decode_node_reservation("null") == decode_node_reservation("{}")
    assert decode_node_reservation("{}") == NodeReservation()


@pytest.mark.parametrize(("text", "path"), [
    ("{", ""), ("[]", ""), ('"0-1"', ""), ('{"resources": {"cpu": NaN}}', ""),
    ('{"resources": []}', "resources"), ('{"resources": "1"}', "resources"),
    ('{"resources": {"cpu": "1C"}}', "resources.cpu"), ('{"resources": {"memory": true}}', "resources.memory"),
    ('{"resources": {"cpu": {}}}', "resources.cpu"),
    ('{"reservedCPUs": 5}', "reservedCPUs"), ('{"reservedCPUs": ["0"]}', "reservedCPUs"),
    ('{"applyPolicy": false}', "applyPolicy"),
])
def test_malformed_input_is_one_typed_error_naming_the_field(text: str, path: str) -> None:
    with pytest.raises(AnnotationError) as e:
        decode_node_reservation(text)
    assert e.value.path == path


@pytest.mark.parametrize(("listed", "cpus"), [("0-3,2-3", [0, 1, 2, 3]), ("", []), ("0,,1", []), ("x", [])])
def test_reserved_cpu_list_is_empty_when_it_does_not_parse(listed: str, cpus: list[int]) -> None:
    """GetReservedCPUs' callers ignore cpuset.Parse's error: an unparsable list reserves no CPU."""
    assert reserved_cpu_list(NodeReservation(reserved_cpus=listed)) == cpus


@pytest.mark.parametrize(("text", "count"), [
    ('{"resources": {"cpu": "1500m"}}', 2), ('{"resources": {"cpu": "2"}}', 2), ('{"resources": {"cpu": "1m"}}', 1),
    ('{"resources": {"cpu": "0"}}', 0), ('{"resources": {"memory": "1Gi"}}', 0),
    ('{"resources": {"cpu": "4"}, "reservedCPUs": "0"}', 0),  # a list wins: no CPUs taken by topology
])
def test_reserved_cpu_count_is_ceil_of_resources_cpu_without_a_list(text: str, count: int) -> None:
    assert reserved_cpu_count(decode_node_reservation(text)) == count


def test_encoding_is_json_marshal_and_reads_back() -> None:
    r = decode_node_reservation('{"resources": {"memory": "1024Mi", "cpu": "1000m"}, "applyPolicy": "Default"}')
    assert json.dumps(r.to_json()) == '{"resources": {"cpu": "1", "memory": "1Gi"}, "applyPolicy": "Default"}'
    assert decode_node_reservation(json.dumps(r.to_json())).to_json() == r.to_json()
    assert NodeReservation().to_json() == {}


def test_raw_allocatable_is_a_resource_list() -> None:
    assert decode_node_raw_allocatable('{"cpu": "20", "memory": 1024, "x": null}') == {"cpu": "20", "memory": "1024",
                                                                                     "x": "0"}
    assert decode_node_raw_allocatable("null") is None
    for text, path in (("[]", ""), ("{", ""), ('{"cpu": "lots"}', "cpu"), ('{"cpu": true}', "cpu")):
        with pytest.raises(AnnotationError) as e:
            decode_node_raw_allocatable(text)
        assert e.value.path == path

"""NodeMetricApiWriter over real HTTP against kmock, which emulates the NodeMetric status subresource."""

from __future__ import annotations

import asyncio
import copy
import logging
import socket
from typing import Any

import jsonschema
import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.core.errors import ApiError
from koordlet.reporters.nodemetric_api import NodeMetricApiWriter

from conftest import crd_schema
from kubedouble import NM, emulate_status_subresource, status_failure

NODE = "node-1"

SPEC = {
    "metricCollectPolicy": {
        "aggregateDurationSeconds": 300,
        "reportIntervalSeconds": 60,
        "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
        "nodeMemoryCollectPolicy": "usageWithoutPageCache",
    }
}


def usage(cpu: str, memory: str) -> dict[str, Any]:
    return {"resources": {"cpu": cpu, "memory": memory}}


STATUS: dict[str, Any] = {
    "updateTime": "2024-05-01T10:00:00Z",
    "nodeMetric": {
        "nodeUsage": usage("1500m", "4Gi"),
        "systemUsage": usage("200m", "512Mi"),
        "aggregatedNodeUsages": [
            {
                "duration": "5m0s",
                "usage": {
                    "avg": usage("1400m", "4Gi"),
                    "p50": usage("1300m", "4Gi"),
                    "p90": usage("1800m", "5Gi"),
                    "p95": usage("1900m", "5Gi"),
                    "p99": usage("2", "5Gi"),
                },
            },
            {"duration": "30m0s", "usage": {"avg": {}, "p50": {}, "p90": {}, "p95": {}, "p99": {}}},
        ],
        "aggregatedSystemUsages": [{"duration": "5m0s", "usage": {"avg": usage("150m", "500Mi")}}],
        "numaUsages": [{"numaNodeID": 0, "nodeUsage": usage("700m", "2Gi")}],
    },
    "podsMetric": [
        {
            "namespace": "default",
            "name": "web",
            "priority": "koord-prod",
            "qos": "LS",
            "podUsage": usage("100m", "128Mi"),
        }
    ],
    "hostApplicationMetric": [],
    "prodReclaimableMetric": {"resource": {}},
}


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected (the API server would silently prune them)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def status_schema() -> dict[str, Any]:
    schema: dict[str, Any] = strict(crd_schema("slo.koordinator.sh_nodemetrics.yaml")["properties"]["status"])
    return schema


def test_sample_status_matches_crd(status_schema: dict[str, Any]) -> None:
    jsonschema.validate(STATUS, status_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"nodeMetric": {"nodeusage": {}}}, status_schema)


def put_status_view(km: kmock.KubernetesEmulator) -> Any:
    return km["put", kmock.resource(NM), kmock.subresource("status")]


def create_nodemetric(km: kmock.KubernetesEmulator, rv: str = "1") -> None:
    km.objects[NM, None, NODE] = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": NODE, "resourceVersion": rv, "generation": 1},
        "spec": copy.deepcopy(SPEC),
    }


class Recorder:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def make_writer(km: kmock.KubernetesEmulator, rec: Recorder | None = None, **kwargs: Any) -> NodeMetricApiWriter:
    rec = rec or Recorder()
    client = KubeClient(KubeConfig(server=str(km.url), token="t"))
    return NodeMetricApiWriter(
        client, NODE, clock=rec.clock, wall_clock=lambda: 1714557600.0, sleep=rec.sleep, **kwargs
    )


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources[NM] = {}
    return kmock


async def test_success_replaces_status_and_keeps_spec(
    km: kmock.KubernetesEmulator, status_schema: dict[str, Any]
) -> None:
    create_nodemetric(km)
    emulate_status_subresource(km)
    writer = make_writer(km)

    assert await asyncio.to_thread(writer.write_status, STATUS) is True

    stored = km.objects[NM, None, NODE].raw
    assert stored["status"] == STATUS
    assert stored["spec"] == SPEC
    assert stored["metadata"]["resourceVersion"] == "2"
    sent = put_status_view(km)[0]
    assert sent.url.path == f"/apis/slo.koordinator.sh/v1alpha1/nodemetrics/{NODE}/status"
    assert sent.data["metadata"]["resourceVersion"] == "1"
    jsonschema.validate(sent.data["status"], status_schema)
    assert writer.stats.successes == 1
    assert writer.stats.last_success == 1714557600.0
    assert writer.stats.failures == {}


async def test_conflict_once_then_success(km: kmock.KubernetesEmulator) -> None:
    create_nodemetric(km)
    # Registered first, so it answers the first PUT only; later PUTs reach the emulated subresource.
    put_status_view(km)[:1] << 409 << status_failure(409, "the object has been modified")
    emulate_status_subresource(km)
    rec = Recorder()
    writer = make_writer(km, rec)

    assert await asyncio.to_thread(writer.write_status, STATUS) is True

    assert len(km["get"]) == 2  # the object is re-read before the retry
    assert len(km["put"]) == 2
    assert km.objects[NM, None, NODE].raw["status"] == STATUS
    assert len(rec.slept) == 1 and 0.01 <= rec.slept[0] <= 0.011  # DefaultBackoff's first step


async def test_conflict_forever_gives_up(km: kmock.KubernetesEmulator) -> None:
    create_nodemetric(km)
    put_status_view(km) << 409 << status_failure(409, "the object has been modified")
    rec = Recorder()
    writer = make_writer(km, rec, burst=10)  # a large budget isolates the retry limit from the rate limit

    assert await asyncio.to_thread(writer.write_status, STATUS) is False

    assert len(km["put"]) == 4  # client-go DefaultBackoff: 4 steps
    assert rec.slept == pytest.approx([0.01, 0.05, 0.25], rel=0.11)
    assert writer.stats.failures == {"conflict": 1}
    assert "status" not in km.objects[NM, None, NODE].raw


async def test_conflicts_also_spend_the_update_budget(km: kmock.KubernetesEmulator) -> None:
    # Upstream takes a limiter token per UpdateStatus attempt, so with burst 2 a third attempt is dropped.
    create_nodemetric(km)
    put_status_view(km) << 409 << status_failure(409, "the object has been modified")
    writer = make_writer(km)

    assert await asyncio.to_thread(writer.write_status, STATUS) is False

    assert len(km["put"]) == 2
    assert writer.stats.failures == {"rate_limited": 1}


async def test_missing_nodemetric_is_skipped_and_never_created(
    km: kmock.KubernetesEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    emulate_status_subresource(km)
    writer = make_writer(km, burst=10)
    caplog.set_level(logging.INFO, logger="koordlet.reporters.nodemetric_api")

    assert await asyncio.to_thread(writer.write_status, STATUS) is False
    assert await asyncio.to_thread(writer.write_status, STATUS) is False

    assert len(km["put"]) == 0 and len(km["post"]) == 0
    assert writer.stats.failures == {"not_found": 2}
    not_found_logs = [r for r in caplog.records if "not found" in r.getMessage()]
    assert len(not_found_logs) == 1 and not_found_logs[0].levelno == logging.INFO

    create_nodemetric(km)
    assert await asyncio.to_thread(writer.write_status, STATUS) is True
    assert any("exists now" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("status", [500, 503])
async def test_server_errors_on_put_return_false(km: kmock.KubernetesEmulator, status: int) -> None:
    create_nodemetric(km)
    put_status_view(km) << status << status_failure(status, "apiserver trouble")
    writer = make_writer(km)

    assert await asyncio.to_thread(writer.write_status, STATUS) is False

    assert len(km["put"]) == 1  # only conflicts are retried
    assert writer.stats.failures == {"server_error": 1}
    assert writer.stats.last_error is not None and "apiserver trouble" in writer.stats.last_error


async def test_server_error_on_get_returns_false(km: kmock.KubernetesEmulator) -> None:
    km[f"get /apis/slo.koordinator.sh/v1alpha1/nodemetrics/{NODE}"] << 503 << status_failure(503, "busy")
    writer = make_writer(km)

    assert await asyncio.to_thread(writer.write_status, STATUS) is False
    assert writer.stats.failures == {"server_error": 1}


async def test_forbidden_is_a_client_error(km: kmock.KubernetesEmulator) -> None:
    create_nodemetric(km)
    put_status_view(km) << 403 << status_failure(403, "nodemetrics/status is forbidden")
    writer = make_writer(km)

    assert await asyncio.to_thread(writer.write_status, STATUS) is False
    assert writer.stats.failures == {"client_error": 1}


async def test_third_immediate_write_is_dropped(km: kmock.KubernetesEmulator) -> None:
    create_nodemetric(km)
    emulate_status_subresource(km)
    rec = Recorder()
    writer = make_writer(km, rec)

    results = [await asyncio.to_thread(writer.write_status, STATUS) for _ in range(3)]

    assert results == [True, True, False]
    assert len(km["put"]) == 2
    assert len(km["get"]) == 2  # the dropped update does not even read the object
    assert writer.stats.failures == {"rate_limited": 1}

    rec.now += 10.0  # 0.1 QPS: one token back after ten seconds
    assert await asyncio.to_thread(writer.write_status, STATUS) is True
    assert writer.stats.successes == 3


def test_unreachable_api_returns_false() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = KubeClient(KubeConfig(server=f"http://127.0.0.1:{port}", timeout=2.0))
    writer = NodeMetricApiWriter(client, NODE)

    assert writer.write_status(STATUS) is False
    assert writer.stats.failures == {"unreachable": 1}


async def test_unserializable_status_returns_false(km: kmock.KubernetesEmulator) -> None:
    create_nodemetric(km)
    emulate_status_subresource(km)
    writer = make_writer(km)

    assert await asyncio.to_thread(writer.write_status, {"updateTime": object()}) is False
    assert writer.stats.failures == {"invalid": 1}
    assert len(km["put"]) == 0


async def test_read_spec(km: kmock.KubernetesEmulator) -> None:
    writer = make_writer(km)
    assert await asyncio.to_thread(writer.read_spec) is None

    create_nodemetric(km)
    assert await asyncio.to_thread(writer.read_spec) == SPEC


async def test_read_spec_raises_on_server_error(km: kmock.KubernetesEmulator) -> None:
    km[f"get /apis/slo.koordinator.sh/v1alpha1/nodemetrics/{NODE}"] << 500 << status_failure(500, "boom")
    writer = make_writer(km)

    with pytest.raises(ApiError) as exc:
        await asyncio.to_thread(writer.read_spec)
    assert exc.value.status == 500

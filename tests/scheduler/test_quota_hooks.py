"""ElasticQuota hook plugins: the registry, the config's refusal of an unknown factory, and each point called."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apis.core.objects import JSON
from scheduler.cli import simulate
from scheduler.cluster import build_cluster
from scheduler.config import ConfigError, load_config
from scheduler.elasticquota.hooks import REGISTRY, QuotaHook, QuotaReader
from scheduler.elasticquota.manager import QuotaInfo
from scheduler.elasticquota.plugin import ElasticQuota

from chartconfig import chart_config


class Recorder(QuotaHook):
    """Refuses pods labelled `deny`, records every call."""

    made: list[Recorder] = []

    def __init__(self, reader: QuotaReader, key: str, args: str) -> None:
        super().__init__(key)
        self.reader, self.args = reader, args
        self.calls: list[tuple[str, ...]] = []
        Recorder.made.append(self)

    def pre_quota_update(self, old: QuotaInfo | None, new: QuotaInfo | None, quota: JSON,
                         state: dict[str, Any]) -> None:
        state["seen"] = new.name if new else ""
        self.calls.append(("pre", new.name if new else ""))

    def post_quota_update(self, old: QuotaInfo | None, new: QuotaInfo | None, quota: JSON,
                          state: dict[str, Any]) -> None:
        self.calls.append(("post", state["seen"]))

    def on_pod_updated(self, quota: str, old: JSON | None, new: JSON | None) -> None:
        self.calls.append(("pod", quota, "-" if old is None else old["metadata"]["name"],
                           "-" if new is None else new["metadata"]["name"]))

    def check_pod(self, quota: str, pod: JSON) -> str | None:
        return "denied by label" if pod["metadata"]["labels"].get("deny") else None

    def update_quota_status(self, quota: JSON, patch: JSON | None) -> JSON | None:
        return {**(patch or {}), "metadata": {"annotations": {"example.com/hooked": self.args}}}


@pytest.fixture
def recorder() -> Iterator[None]:
    Recorder.made = []
    REGISTRY.register("recorder", Recorder)
    yield
    del REGISTRY.factories["recorder"]


def config(tmp_path: Path, factory: str = "recorder") -> str:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps(chart_config(pluginConfig=[{"name": "ElasticQuota", "args": {"hookPlugins": [
        {"key": "rec", "factoryKey": factory, "factoryArgs": "x=1"}]}}])))
    return str(cfg)


def quota(name: str, tree: str = "") -> dict[str, Any]:
    labels = {"quota.scheduling.koordinator.sh/tree-id": tree} if tree else {}
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"max": {"cpu": "10"}, "min": {"cpu": "1"}}}


def pod(name: str, quota_name: str, node: str = "", deny: bool = False) -> dict[str, Any]:
    labels = {"quota.scheduling.koordinator.sh/name": quota_name}
    if deny:
        labels["deny"] = "true"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running" if node else "Pending"}}


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}}


def test_an_unregistered_factory_refuses_the_configuration(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hookPlugins: failed to initialize hook plugin rec: factory nope not found"):
        load_config(config(tmp_path, "nope"))


def test_each_point_is_called(tmp_path: Path, recorder: None) -> None:
    cluster = build_cluster([NODE, quota("qa"), quota("qt", "tree-1"), pod("running", "qa", "n1")])
    out = simulate(cluster, [pod("ok", "qa"), pod("no", "qa", deny=True), pod("t", "qt")], config(tmp_path))
    by = {p["pod"]: p for p in out["placements"]}
    assert by["default/ok"]["node"] == "n1" and by["default/t"]["node"] == "n1"
    assert by["default/no"]["reason"] == "0/1 nodes are available: CheckPod failed for hook plugin rec, err: " \
                                         "denied by label."
    # one instance per tree: the default tree's and tree-1's, each told of its own quotas only
    default, tree1 = (next(r for r in Recorder.made if r.reader.quota_info(q)) for q in ("qa", "qt"))
    assert default is not tree1 and default.args == "x=1"
    assert ("pre", "qa") in default.calls and ("post", "qa") in default.calls and ("pre", "qt") not in default.calls
    assert ("pod", "qa", "-", "running") in default.calls and ("pod", "qa", "-", "ok") in default.calls
    assert not any(c[0] == "pod" and c[3] == "no" for c in default.calls)
    assert ("pod", "qt", "-", "t") in tree1.calls
    assert tree1.reader.child_quota_infos("koordinator-root-quota").keys() == {"qt"}


def test_status_hook_adds_to_the_patch(tmp_path: Path, recorder: None) -> None:
    cluster = build_cluster([NODE, quota("qa")])
    plugin = ElasticQuota(load_config(config(tmp_path)).plugin_args("ElasticQuota"))
    plugin.bind(cluster)
    obj = cluster.elastic_quotas[0]
    assert plugin.status_patch(obj, None) == {"metadata": {"annotations": {"example.com/hooked": "x=1"}}}
    plugin.forget(pod("gone", "qa"))  # a pod it never saw: nothing to tell
    assert all(c[0] != "pod" for r in Recorder.made for c in r.calls)

"""The stages: upstream's hook order, the Ignore failure policy (a broken hook never stops the others nor raises),
and random annotations through every entry point."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from apis.slo.decode import nodeslo_config
from koordlet.host.driver import CgroupDriver
from koordlet.host.paths import HostPaths
from koordlet.nri.hooks import stages
from koordlet.nri.hooks.context import HookCall
from koordlet.nri.hooks.facts import GroupIdentityFacts, NodeFacts
from koordlet.nri.hooks.model import Adjustment, ContainerInfo, DeviceNode, HookResult, PodInfo
from koordlet.nri.hooks.options import HookOptions
from koordlet.nri.hooks.stages import STAGES, Hook
from koordlet.qos.resctrl_facts import ResctrlFacts

UID = "0f6bb8d1-5d2c-4f6e-8a3a-1b2c3d4e5f60"
EVERYTHING = HookOptions(gates={"GPUEnvInject": True, "RDMADeviceInject": True, "Resctrl": True,
                                "GroupIdentity": True, "HamiCoreVGPUMonitor": True},
                         gpu_env_uuid=True, xpu_device_inject=True)
CONTAINER = ContainerInfo("abc", "sb", "main")


def node_facts(root: str = "/node", vendor: str = "huawei") -> NodeFacts:
    dev = {p: DeviceNode(p, "c", 200, i, 0o660) for i, p in enumerate(
        ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1", "/dev/davinci_manager",
         "/dev/davinci0", "/dev/davinci1", "/dev/cambricon_dev0", "/dev/cambricon_ctl"])}
    return NodeFacts(
        HostPaths.under(root), 1, CgroupDriver.SYSTEMD, dev_nodes=dev,
        uverbs={"0000:01:00.0": "uverbs0", "0000:01:00.2": "uverbs1"},
        resctrl=ResctrlFacts(supported=True, vendor="GenuineIntel", mounted=True, cbm_mask=0x7ff, cache_ids=(0, 1),
                             has_mb=True, num_closids=16),
        resctrl_groups=frozenset({f"koordlet-{UID}"}), group_identity=GroupIdentityFacts(True, 1),
        nodeslo=nodeslo_config({"resourceQOSStrategy": {"lsClass": {"cpuQOS": {"enable": True}},
                                                            "beClass": {"cpuQOS": {"enable": True}}}}),
        gpu_vendor=vendor)


def test_hooks_run_in_upstreams_byte_order() -> None:
    assert [h.name for h in STAGES[stages.PRE_RUN_POD_SANDBOX]] == [
        "BatchResource", "CPUSetAllocator", "GroupIdentity", "Resctrl"]
    assert [h.name for h in STAGES[stages.PRE_CREATE_CONTAINER]] == [
        "BatchResource", "CPUSetAllocator", "Resctrl", "gpu env inject", "rdma device inject", "xpu device inject"]
    assert [h.name for h in STAGES[stages.PRE_UPDATE_CONTAINER_RESOURCES]] == ["BatchResource", "CPUSetAllocator"]
    assert [h.name for h in STAGES[stages.PRE_REMOVE_RUN_POD_SANDBOX]] == ["Resctrl"]


def test_every_stage_with_everything_enabled() -> None:
    annotations = {
        ANNOTATION_DEVICE_ALLOCATED: json.dumps({"gpu": [{"minor": 0, "id": "GPU-a"}, {"minor": 1, "id": "GPU-b"}],
                                                 "rdma": [{"minor": 0, "id": "0000:01:00.0",
                                                           "extension": {"vfs": [{"busID": "0000:01:00.2"}]}}]}),
        "node.koordinator.sh/resctrl": '{"llc":{"schemata":{"range":[0,50]}}}'}
    pod = PodInfo("sb", UID, "ns", "p", labels={"koordinator.sh/qosClass": "BE"}, annotations=annotations,
                  cgroup_parent=f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice")
    facts = node_facts()
    r = stages.create_container(pod, CONTAINER, facts, EVERYTHING)
    assert r.failures == [] and r.plan.writes == []
    dev = facts.dev_nodes
    assert r.adjustment == Adjustment(
        env={"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "ASCEND_VISIBLE_DEVICES": "0,1"},
        devices=[DeviceNode("/dev/infiniband/rdma_cm", "c", 200, 0, 0o666),
                 DeviceNode("/dev/infiniband/uverbs1", "c", 200, 2, 0o666),
                 dev["/dev/davinci_manager"], dev["/dev/davinci0"], dev["/dev/davinci1"]],
        rdt_class=f"koordlet-{UID}")
    # BatchResource: no batch resources declared; CPUSetAllocator: no rule yet, BE: nothing
    assert [ok for _, ok, _ in r.timings] == [True] * 6
    r = stages.run_pod_sandbox(pod, facts, EVERYTHING)
    assert r.failures == [] and not r.adjustment
    assert [(os.path.basename(w.path), w.value) for w in r.plan.writes] == [
        ("cpu.bvt_warp_ns", "-1"), ("schemata", "L3:0=3f;1=3f;\n")]  # the group exists already
    r = stages.update_container(pod, CONTAINER, facts, EVERYTHING)
    assert not r.adjustment and r.failures == [] and not r.plan.writes
    r = stages.remove_pod_sandbox(pod, facts, EVERYTHING)
    assert [w.op for w in r.plan.writes] == ["rmdir"]


def test_a_hook_that_raises_does_not_stop_the_others(monkeypatch: Any) -> None:
    def broken(call: HookCall) -> HookResult:
        raise KeyError("boom")

    hooks = tuple(Hook(h.name, h.enabled, broken) if h.name == "gpu env inject" else h
                  for h in STAGES[stages.PRE_CREATE_CONTAINER])
    monkeypatch.setitem(STAGES, stages.PRE_CREATE_CONTAINER, hooks)
    pod = PodInfo("sb", UID, "ns", "p", annotations={
        ANNOTATION_DEVICE_ALLOCATED: '{"gpu":[{"minor":0}],"rdma":[{"id":"0000:01:00.0"}]}'})
    r = stages.create_container(pod, CONTAINER, node_facts(vendor=""), EVERYTHING)
    assert [(name, ok) for name, ok, _ in r.timings] == [
        ("BatchResource", True), ("CPUSetAllocator", True), ("Resctrl", True), ("gpu env inject", False),
        ("rdma device inject", True), ("xpu device inject", True)]
    assert "NVIDIA_VISIBLE_DEVICES" not in r.adjustment.env
    assert [d.path for d in r.adjustment.devices] == ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"]
    (f,) = r.failures
    assert (f.kind, f.name, f.uid, f.field, f.reason) == ("Pod", "ns/p", UID, "", "RuntimeHookFailed")
    assert f.message == "gpu env inject: unexpected error KeyError: 'boom'"


def test_broken_options_do_not_raise() -> None:
    class Gates(dict[str, bool]):
        def get(self, *a: Any) -> Any:
            raise RuntimeError("no")

    r = stages.create_container(PodInfo("sb", UID, "ns", "p"), CONTAINER, node_facts(),
                                HookOptions(gates=Gates(), xpu_device_inject=False))
    assert r == HookResult()


# ---- random input through every entry point -----------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12)


def _mostly(valid: Any, junk: Any = _json) -> Any:
    """Well-formed nine times out of ten, so most examples reach a hook's later steps."""
    return st.integers(0, 9).flatmap(lambda n: junk if n == 0 else valid)


_quantity = _mostly(st.sampled_from(["100", "50", "0", "-1", "16Gi", "1.5", "1e3", "99.9"]) | st.integers(-200, 200),
                    st.sampled_from(["x", "", "1..2", "Gi"]))
_alloc_item = st.fixed_dictionaries({}, optional={
    "minor": _mostly(st.integers(-1, 3)),
    "id": _mostly(st.sampled_from(["", "0000:01:00.0", "0000:01:00.2", "GPU-1", "../x"])),
    "resources": _mostly(st.dictionaries(st.sampled_from(["koordinator.sh/gpu-core", "koordinator.sh/gpu-memory",
                                                          "koordinator.sh/gpu-memory-ratio", "x"]), _quantity)),
    "extension": _mostly(st.fixed_dictionaries({}, optional={
        "vfs": _mostly(st.lists(st.fixed_dictionaries({}, optional={
            "busID": _mostly(st.sampled_from(["0000:01:00.2", "0000:09:00.1", ""])),
            "minor": _mostly(st.integers(-1, 2))}), max_size=3)),
        "gpuSharedResourceTemplate": _mostly(st.sampled_from(["", "vir01"]))})),
})
_allocated = _mostly(
    st.fixed_dictionaries({"gpu": st.lists(_alloc_item, min_size=1, max_size=3)},
                          optional={"rdma": st.lists(_alloc_item, min_size=1, max_size=2)}).map(json.dumps),
    st.one_of(
        st.dictionaries(st.sampled_from(["gpu", "rdma", "fpga", "GPU"]), _mostly(st.lists(_alloc_item, max_size=3)),
                        max_size=3).map(json.dumps),
        st.fixed_dictionaries({"rdma": st.lists(_alloc_item, min_size=1, max_size=2)}).map(json.dumps),
        _json.map(json.dumps),
        st.text(max_size=30),
    ))
_resctrl = st.one_of(st.sampled_from(['{"llc":{"schemata":{"range":[20,80]}}}', '{"mb":{"schemata":{"percent":35}}}',
                                      "{}", "null", "[]"]), _json.map(json.dumps), st.text(max_size=20))
_annotations = _mostly(st.fixed_dictionaries({ANNOTATION_DEVICE_ALLOCATED: _allocated}, optional={
    "node.koordinator.sh/resctrl": _resctrl,
    "koordinator.sh/cpuQOS": st.one_of(_json.map(json.dumps), st.text(max_size=20))}), st.just({}))
_labels = st.fixed_dictionaries({}, optional={
    "koordinator.sh/qosClass": st.sampled_from(["LSE", "LSR", "LS", "BE", "SYSTEM", "", "x"]),
    "koordinator.sh/gpu-isolation-provider": _mostly(st.just("HAMi-core"), st.sampled_from(["hami-core", ""]))})
_pods = st.builds(PodInfo, sandbox_id=st.just("sb"), uid=_mostly(st.just(UID), st.sampled_from(["", "a/b", "../x"])),
                  namespace=st.just("ns"), name=st.just("p"), labels=_labels, annotations=_annotations,
                  cgroup_parent=_mostly(st.sampled_from(["kubepods-burstable-pod1.slice", "/kubepods/besteffort/pod1"]),
                                        st.sampled_from(["", "../x", "a--b.slice"]) | st.text(max_size=20)))


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=_pods, vendor=st.sampled_from(["huawei", "cambricon", "nvidia", ""]),
       name=_mostly(st.just("main"), st.sampled_from(["", "a/b"])))
def test_random_annotations_never_raise(pod: PodInfo, vendor: str, name: str) -> None:
    facts = node_facts("/node", vendor)
    container = ContainerInfo("abc", "sb", name)
    results = [stages.create_container(pod, container, facts, EVERYTHING),
               stages.run_pod_sandbox(pod, facts, EVERYTHING),
               stages.update_container(pod, container, facts, EVERYTHING),
               stages.remove_pod_sandbox(pod, facts, EVERYTHING)]
    for r in results:
        for f in r.failures:  # bad input is reported against a field, never as an unexpected error
            assert "unexpected error" not in f.message, f
            assert f.kind == "Pod" and f.reason == "RuntimeHookFailed"
            assert f.field.startswith(("annotations[", "linux.cgroup_parent", "metadata.uid", "container.name")), f
        for d in r.adjustment.devices:
            assert d.path.startswith("/dev/") and ".." not in d.path
        for w in r.plan.writes:
            assert w.path.startswith("/node/") and ".." not in w.path.split("/")

"""Bad input at volume for the agent's intake: 1 500 NodeSLO objects and 1 500 pod lists, property-checked.

The NodeSLO intake (validate_nodeslo, merge_nodeslo_spec) and the pod intake (PodState.update) run before any
planner: whatever they are given, they must not raise, the merged spec must keep every default field with the
default's JSON type (planners read it without checking types again), a NodeSLO the validation accepts must still
be valid after the merge, and a pod the intake keeps must have cgroup dirs that name only itself.
Counts: 1 500 NodeSLO objects + 1 500 pod lists = 3 000 examples (a few seconds). The QoS planners' side is
tests/qos/test_bad_input_volume.py.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.slo.config import spec_from_merged
from apis.slo.decode import merge_nodeslo_spec, validate_nodeslo
from apis.slo.defaults import default_nodeslo_spec
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir
from koordlet.states.pods import PodState

from simhost import make_pod

FUZZ = settings(deadline=None, database=None, derandomize=os.environ.get("KOORDLET_FUZZ_RANDOM") != "1",
                suppress_health_check=list(HealthCheck))

NASTY = st.sampled_from(["", "..", "../..", "/etc", "a/../b", "x\ny", "\x00", "-1", "max", "NaN", "1e999", "１",
                         "koord-prod", "BE", "LS"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**65, 2**65), st.integers(-3, 1003),
                    st.floats(allow_nan=True, allow_infinity=True), NASTY, st.text(max_size=8))
RANDOM_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.one_of(NASTY, st.text(max_size=6)), inner, max_size=3), max_leaves=10)
DEFAULT = default_nodeslo_spec()


def leaves(obj: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from leaves(v, (*path, k))
    else:
        yield path, obj


LEAVES = list(leaves(DEFAULT))


@st.composite
def mutated_spec(draw: st.DrawFn) -> dict[str, Any]:
    """The default spec with some leaves (and sometimes whole objects) replaced: near the bounds, of the wrong type,
    or junk; keys kept, so the merge and the validation see the fields they know."""
    spec = copy.deepcopy(DEFAULT)
    for _ in range(draw(st.integers(1, 8))):
        path, value = draw(st.sampled_from(LEAVES))
        if draw(st.integers(0, 4)) == 0:
            path = path[:draw(st.integers(1, len(path)))]  # replace a whole object
        new = draw(st.one_of(st.integers(-5, 105), st.integers(-2**64, 2**64), SCALARS, RANDOM_JSON)
                   if isinstance(value, int) else SCALARS | RANDOM_JSON)
        target = spec
        for k in path[:-1]:
            target = target[k] if isinstance(target.get(k), dict) else target.setdefault(k, {})
            if not isinstance(target, dict):
                break
        else:
            target[path[-1]] = new
    return spec


def received(spec: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(spec, dict) or k not in spec:
            return None
        spec = spec[k]
    return spec


def json_type(value: Any) -> str:
    return "bool" if isinstance(value, bool) else type(value).__name__


@settings(FUZZ, max_examples=1_500)
@given(spec=st.one_of(mutated_spec(), mutated_spec(), RANDOM_JSON))
def test_1500_nodeslo_objects_through_validation_and_merge(spec: Any) -> None:
    """Never raises (nor does its typed form); the merged spec has every default leaf with the default's type;
    accepted stays valid."""
    obj = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n"}, "spec": spec}
    problems = validate_nodeslo(obj)
    assert all(isinstance(p, str) and p for p in problems)
    merged = merge_nodeslo_spec(spec if isinstance(spec, dict) else None)
    for path, value in LEAVES:
        got: Any = merged
        for k in path:
            assert isinstance(got, dict) and k in got, f"merged spec lost {'.'.join(path)}"
            got = got[k]
        if path[0] != "extensions" and got != received(spec, path):  # int-or-string fields keep a received string
            assert json_type(got) == json_type(value), f"{'.'.join(path)}: {got!r} replaced the default {value!r}"
    if not problems:
        assert validate_nodeslo({**obj, "spec": merged}) == [], "a valid NodeSLO became invalid when merged"
    spec_from_merged(merged)  # the typed form of any merged spec: never raises


_SAFE_DIR = re.compile(r"[A-Za-z0-9_.-]+")


@st.composite
def junk_pod(draw: st.DrawFn, index: int) -> dict[str, Any]:
    pod: dict[str, Any] = make_pod(f"p{index}", f"uid-{index}", draw(st.sampled_from(["Guaranteed", "Burstable",
                                                                                     "BestEffort"])),
                                   containers=draw(st.integers(0, 2)))
    for field in draw(st.lists(st.sampled_from(["metadata.uid", "metadata.name", "metadata.namespace",
                                                "metadata.labels", "status.qosClass", "status.phase",
                                                "status.containerStatuses", "spec", "spec.containers", "status",
                                                "spec.priority", "metadata"]), max_size=3)):
        parent, _, leaf = field.rpartition(".")
        target = pod.get(parent) if parent else pod
        if isinstance(target, dict):
            target[leaf] = draw(st.one_of(NASTY, RANDOM_JSON))
    status = pod.get("status")
    statuses = status.get("containerStatuses") if isinstance(status, dict) else None
    for cs in statuses if isinstance(statuses, list) else []:
        if isinstance(cs, dict) and draw(st.booleans()):
            cs["containerID"] = draw(st.one_of(NASTY, st.just("containerd://../../etc"), st.just("docker://a/b"),
                                               RANDOM_JSON))
    return pod


@settings(FUZZ, max_examples=1_500)
@given(data=st.data(), driver=st.sampled_from(list(CgroupDriver)))
def test_1500_pod_lists_through_the_pod_intake(data: st.DataObject, driver: CgroupDriver) -> None:
    """PodState.update never raises; a kept pod's cgroup dir is its QoS dir plus one plain name, and each container
    dir is one plain name below it (no "..", no "/" from the uid or the container id)."""
    raw = [data.draw(junk_pod(i)) for i in range(data.draw(st.integers(1, 4)))]
    state = PodState(driver, Health())
    state.update(raw)
    qos_dirs = {qos_dir(driver, q) for q in K8sQoS}
    for pod in state.pods:
        parent, _, name = pod.cgroup_dir.rpartition("/")
        assert parent in qos_dirs and _SAFE_DIR.fullmatch(name) and name not in (".", ".."), pod.cgroup_dir
        for c in pod.containers:
            if c.cgroup_dir is not None:
                below, _, cname = c.cgroup_dir.rpartition("/")
                assert below == pod.cgroup_dir and _SAFE_DIR.fullmatch(cname) and cname not in (".", ".."), c
    skipped = sum(n for (kind, _), n in state.health.skipped.items() if kind == "pod")
    assert len(state.pods) + skipped == len(raw)

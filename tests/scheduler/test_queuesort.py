"""Coscheduling's queue-sort Less as upstream's coscheduling_test.go TestLess (v1.5/v1.6) states it, case by case,
and PrioritySort's order with v1.7's NextPod (a gang at its representative's place); QueueState carries what
upstream's queue and gang cache remember (queue timestamps, GangGroup LastScheduleTime, child schedule cycles)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.config import load_config, parse_config
from scheduler.framework import Scheduler
from scheduler.gang.plugin import Coscheduling
from scheduler.gang.queuesort import QueueState, coscheduling_order, priority_order

GANG, MIN, GROUPS = ("gang.scheduling.koordinator.sh/name", "gang.scheduling.koordinator.sh/min-available",
                     "gang.scheduling.koordinator.sh/groups")


def pod(name: str, *, prio: int = 0, sub: str | None = None, gang: str = "", groups: list[str] | None = None,
        created: str = "2024-01-01T00:00:00Z") -> dict[str, Any]:
    annotations = {GANG: gang, MIN: "2"} if gang else {}
    if groups:
        annotations[GROUPS] = json.dumps(groups)
    return {"metadata": {"name": name, "namespace": "default", "creationTimestamp": created,
                         "labels": {"koordinator.sh/priority": sub} if sub is not None else {},
                         "annotations": annotations},
            "spec": {"priority": prio, "containers": [{"name": "c"}]}}


def first(a: dict[str, Any], b: dict[str, Any], state: QueueState | None = None) -> str:
    """Which of two pods Less puts first, asked both ways round (Less(a, b) and Less(b, a) must agree)."""
    cluster = build_cluster([])
    one = Coscheduling().order([a, b], cluster, state)[0]["metadata"]["name"]
    other = Coscheduling().order([b, a], cluster, state)[0]["metadata"]["name"]
    assert one == other
    return str(one)


def test_less_pod_priority() -> None:
    assert first(pod("pod1", prio=10), pod("pod2", prio=100)) == "pod2"


def test_less_sub_priority() -> None:
    assert first(pod("pod1", prio=10, sub="111"), pod("pod2", prio=10, sub="222")) == "pod2"


def test_less_two_gangs_by_last_schedule_time() -> None:
    # gangB's first member was created (seen by the gang cache) before gangA's
    a = pod("pod1", gang="gangA", created="2024-01-01T00:00:01Z")
    b = pod("pod2", gang="gangB", created="2024-01-01T00:00:00Z")
    assert first(a, b) == "pod2"


def test_less_gang_and_normal_pod_by_last_schedule_time() -> None:
    # the lone pod's queue timestamp is 1000 s before the gang was seen
    gang = pod("pod1", gang="gangA", created="2024-01-01T00:20:00Z")
    lone = pod("pod2", created="2024-01-01T00:20:00Z")
    state = QueueState(timestamps={"default/pod2": "2024-01-01T00:03:20Z"})
    assert first(gang, lone, state) == "pod2"
    assert first(gang, lone, QueueState(timestamps={"default/pod2": "2024-01-01T00:30:00Z"})) == "pod1"


def test_less_same_gang_group_then_gang_id() -> None:
    # one GangGroup (one LastScheduleTime) of two gangs, members created apart: gangA < gangB decides
    group = ["default/gangA", "default/gangB"]
    b = pod("pod1", gang="gangB", groups=group, created="2024-01-01T00:00:00Z")
    a = pod("pod2", gang="gangA", groups=group, created="2024-01-01T00:00:05Z")
    assert first(b, a) == "pod2"


def test_less_same_gang_child_schedule_cycle() -> None:
    p1, p2 = pod("pod1", gang="gangB"), pod("pod2", gang="gangB", created="2024-01-01T00:00:01Z")
    assert first(p1, p2, QueueState(child_cycles={"default/pod1": 1})) == "pod2"


def test_less_same_gang_same_cycle_by_name() -> None:
    p1, p2 = pod("pod1", gang="gangB", created="2024-01-01T00:00:09Z"), pod("pod2", gang="gangB")
    assert first(p1, p2) == "pod1"


def test_less_recorded_group_time_wins_over_member_times() -> None:
    """A GangGroup tried in full gets a new LastScheduleTime (resetPodLastScheduleTime): it goes behind a younger
    gang that has not been tried yet."""
    old = pod("old-0", gang="old", created="2024-01-01T00:00:00Z")
    young = pod("young-0", gang="young", created="2024-01-01T00:05:00Z")
    assert first(old, young) == "old-0"
    assert first(old, young, QueueState(group_times={"default/old": "2024-01-01T00:06:00Z"})) == "young-0"


def test_priority_sort_takes_a_gang_at_its_representative() -> None:
    """v1.7: PrioritySort (priority, then queue timestamp; no sub-priority) over lone pods and gangs, a gang's
    members back to back where its first member stands; a unit that failed comes back with a new timestamp and
    goes behind the units waiting since (fair queuing)."""
    pods = [pod("g-1", gang="g", created="2024-01-01T00:00:03Z"),
            pod("lone", sub="9", created="2024-01-01T00:00:02Z"),
            pod("g-0", gang="g", created="2024-01-01T00:00:01Z"),
            pod("late", created="2024-01-01T00:00:04Z")]
    got = [p["metadata"]["name"] for p in priority_order(pods, lambda p: 0)]
    assert got == ["g-0", "g-1", "lone", "late"]
    failed = QueueState(timestamps={"default/g-0": "2024-01-01T00:01:00Z", "default/g-1": "2024-01-01T00:01:00Z"})
    got = [p["metadata"]["name"] for p in priority_order(pods, lambda p: 0, failed)]
    assert got == ["lone", "late", "g-0", "g-1"]
    assert [p["metadata"]["name"] for p in coscheduling_order(pods, lambda p: 0, failed)][:2] == ["lone", "late"]


def test_next_pod_keeps_gangs_together_only_with_coscheduling_in_the_profile() -> None:
    """koord-scheduler registers Coscheduling's NextPod whenever the profile names the plugin (the v1.7 chart does,
    at preEnqueue and on); with Coscheduling disabled PrioritySort orders each pod on its own."""
    chart = load_config(str(Path(__file__).parent / "seeds" / "chart" / "koord-scheduler-config-v1.7.0.yaml"))
    without = parse_config({"profiles": [{"schedulerName": "x", "plugins": {
        "multiPoint": {"disabled": [{"name": "Coscheduling"}]}}}]})
    pods = [pod("g-0", gang="g", created="2024-01-01T00:00:01Z"), pod("lone", created="2024-01-01T00:00:02Z"),
            pod("g-1", gang="g", created="2024-01-01T00:00:03Z")]
    cluster = build_cluster([])
    assert [p["metadata"]["name"] for p in Scheduler(cluster, profile(chart)).order(pods)] == ["g-0", "g-1", "lone"]
    assert [p["metadata"]["name"] for p in Scheduler(cluster, profile(without)).order(pods)] == ["g-0", "lone", "g-1"]

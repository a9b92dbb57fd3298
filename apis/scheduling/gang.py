"""Gang scheduling's names (gang.scheduling.koordinator.sh and the coscheduling PodGroup labels) and the decoder
of the gang a pod declares itself a member of."""

from __future__ import annotations

from collections.abc import Mapping

# Upstream: apis/extension/coscheduling.go; sigs.k8s.io/scheduler-plugins apis/scheduling (PodGroup labels).

LABEL_POD_GROUP = "pod-group.scheduling.sigs.k8s.io"
LABEL_POD_GROUP_DEPRECATED = "pod-group.scheduling.sigs.k8s.io/name"
LABEL_MIN_AVAILABLE_DEPRECATED = "pod-group.scheduling.sigs.k8s.io/min-available"
ANNOTATION_MATCH_POLICY_ALIAS = "pod-group.scheduling.sigs.k8s.io/match-policy"

_PREFIX = "gang.scheduling.koordinator.sh"
ANNOTATION_GANG_NAME = f"{_PREFIX}/name"
ANNOTATION_GANG_MIN_AVAILABLE = f"{_PREFIX}/min-available"
ANNOTATION_GANG_TOTAL_NUMBER = f"{_PREFIX}/total-number"
ANNOTATION_GANG_WAITING_TIME = f"{_PREFIX}/waiting-time"
ANNOTATION_GANG_MODE = f"{_PREFIX}/mode"
ANNOTATION_GANG_MATCH_POLICY = f"{_PREFIX}/match-policy"
ANNOTATION_GANG_GROUPS = f"{_PREFIX}/groups"
ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC = f"{_PREFIX}/network-topology-spec"
ANNOTATION_GANG_NETWORK_TOPOLOGY_INDEX = f"{_PREFIX}/network-topology-index"
ANNOTATION_NETWORK_TOPOLOGY_SELECTOR = "scheduling.koordinator.sh/network-topology-selector"
ANNOTATION_BIND_GANG_GROUP_ID = "internal.scheduling.koordinator.sh/bind-gang-group-id"
ANNOTATION_BIND_GANG_MEMBER_COUNT = "internal.scheduling.koordinator.sh/bind-gang-member-count"
# Deprecated spellings upstream still writes beside the internal ones at PreBind (and deletes with them).
DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID = "scheduling.koordinator.sh/bind-gang-group-id"
DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT = "scheduling.koordinator.sh/bind-gang-member-count"


BIND_GANG_ANNOTATIONS = (ANNOTATION_BIND_GANG_GROUP_ID, ANNOTATION_BIND_GANG_MEMBER_COUNT,
                         DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID, DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT)


def bind_gang_annotations(group_id: str, members: int) -> dict[str, str]:
    """What Coscheduling's PreBind writes on each member of a gang group: both spellings of the pair."""
    count = str(members)
    return {ANNOTATION_BIND_GANG_GROUP_ID: group_id, ANNOTATION_BIND_GANG_MEMBER_COUNT: count,
            DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID: group_id, DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT: count}
LABEL_JOB_KEY = "scheduling.koordinator.sh/questioned-object-key"

GANG_MODE_STRICT = "Strict"
GANG_MODE_NON_STRICT = "NonStrict"
MATCH_POLICY_ONCE_SATISFIED = "once-satisfied"
MATCH_POLICY_ONLY_WAITING = "only-waiting"
MATCH_POLICY_WAITING_AND_RUNNING = "waiting-and-running"
MATCH_POLICIES = (MATCH_POLICY_ONCE_SATISFIED, MATCH_POLICY_ONLY_WAITING, MATCH_POLICY_WAITING_AND_RUNNING)


def gang_name(labels: Mapping[str, object], annotations: Mapping[str, object]) -> str | None:
    """The gang a pod belongs to (util.GetGangNameByPod): the PodGroup label, its deprecated spelling, then the
    gang annotation; the first that is set wins. None outside any gang."""
    for name in (labels.get(LABEL_POD_GROUP), labels.get(LABEL_POD_GROUP_DEPRECATED),
                 annotations.get(ANNOTATION_GANG_NAME)):
        if name:
            return str(name)
    return None

"""ElasticQuota's names: the special quotas, the quota.scheduling.koordinator.sh labels and annotations, and
ElasticQuotaProfile's group."""

from __future__ import annotations

# Upstream: apis/extension/elastic_quota.go.

QUOTA_API_VERSION = "scheduling.sigs.k8s.io/v1alpha1"  # ElasticQuota
PROFILE_API_VERSION = "quota.koordinator.sh/v1alpha1"  # ElasticQuotaProfile (koord-manager's)
PROFILE_KIND = "ElasticQuotaProfile"

ROOT_QUOTA = "koordinator-root-quota"
SYSTEM_QUOTA = "koordinator-system-quota"
DEFAULT_QUOTA = "koordinator-default-quota"

_PREFIX = "quota.scheduling.koordinator.sh"
LABEL_QUOTA_IS_PARENT = f"{_PREFIX}/is-parent"
LABEL_QUOTA_PARENT = f"{_PREFIX}/parent"
LABEL_QUOTA_ALLOW_LENT_RESOURCE = f"{_PREFIX}/allow-lent-resource"
LABEL_QUOTA_NAME = f"{_PREFIX}/name"  # on a pod: the quota it is charged to
LABEL_QUOTA_IS_ROOT = f"{_PREFIX}/is-root"
LABEL_QUOTA_TREE_ID = f"{_PREFIX}/tree-id"
LABEL_QUOTA_PROFILE = f"{_PREFIX}/profile"  # on a tree's root quota: the ElasticQuotaProfile it was made from
LABEL_QUOTA_IGNORE_DEFAULT_TREE = f"{_PREFIX}/ignore-default-tree"  # its total is not taken from the default tree
LABEL_QUOTA_PREEMPTIBLE = f"{_PREFIX}/preemptible"  # on a pod: "false" keeps it from being preempted
LABEL_QUOTA_ALLOW_FORCE_UPDATE = f"{_PREFIX}/allow-force-update"
ANNOTATION_QUOTA_SHARED_WEIGHT = f"{_PREFIX}/shared-weight"
ANNOTATION_QUOTA_RUNTIME = f"{_PREFIX}/runtime"
ANNOTATION_QUOTA_REQUEST = f"{_PREFIX}/request"
ANNOTATION_QUOTA_CHILD_REQUEST = f"{_PREFIX}/child-request"
ANNOTATION_QUOTA_GUARANTEED = f"{_PREFIX}/guaranteed"
ANNOTATION_QUOTA_ALLOCATED = f"{_PREFIX}/allocated"
ANNOTATION_QUOTA_NON_PREEMPTIBLE_REQUEST = f"{_PREFIX}/non-preemptible-request"
ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED = f"{_PREFIX}/non-preemptible-used"
ANNOTATION_QUOTA_NAMESPACES = f"{_PREFIX}/namespaces"
ANNOTATION_QUOTA_TOTAL_RESOURCE = f"{_PREFIX}/total-resource"  # on a tree's root quota: the tree's total
ANNOTATION_QUOTA_RESOURCE_KEYS = f"{_PREFIX}/resource-keys"  # on a profile: the root quota's resources
ANNOTATION_QUOTA_UNSCHEDULABLE_RESOURCE = f"{_PREFIX}/unschedulable-resource"

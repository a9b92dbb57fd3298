"""ElasticQuota: multi-level quotas with min/max, borrowing by shared weight, and runtime quota (v0.7)."""

from scheduler.elasticquota.manager import GroupQuotaManager
from scheduler.elasticquota.model import QuotaSpec, validate_quotas
from scheduler.elasticquota.plugin import ElasticQuota, ElasticQuotaArgs

__all__ = ["ElasticQuota", "ElasticQuotaArgs", "GroupQuotaManager", "QuotaSpec", "validate_quotas"]

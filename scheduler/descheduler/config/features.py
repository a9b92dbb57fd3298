"""koord-descheduler's `--feature-gates`: the gates of Koordinator's own feature gate (pkg/features/features.go at
a7a1b76: the webhook and quota gates, the descheduler's DisablePVCReservation and the transformer gates), which
upstream's koord-descheduler binds the flag to (cmd/koord-descheduler/app/options), with their defaults and
pre-release stages, read as component-base's featuregate reads the flag.

Of them koord-descheduler reads DisablePVCReservation (the Reservation template, migration.reservation); the
transformer gates change what upstream's descheduler reads from pods and nodes and are not built here (turning one
on is said once at start); the rest upstream's descheduler never reads either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

ALPHA, BETA = "Alpha", "Beta"
DISABLE_PVC_RESERVATION = "DisablePVCReservation"
"""The Reservation of a ReservationFirst job leaves out the pod's PVC and ephemeral volumes."""

GATES: dict[str, tuple[bool, str]] = {
    # defaultFeatureGates (the manager's webhooks and quota tree)
    "PodMutatingWebhook": (True, BETA), "PodValidatingWebhook": (True, BETA),
    "ElasticMutatingWebhook": (True, BETA), "ElasticValidatingWebhook": (True, BETA),
    "NodeMutatingWebhook": (False, ALPHA), "NodeValidatingWebhook": (False, ALPHA),
    "ConfigMapValidatingWebhook": (False, ALPHA), "ReservationMutatingWebhook": (False, ALPHA),
    "WebhookFramework": (True, BETA), "ColocationProfileSkipMutatingResources": (False, ALPHA),
    "ColocationProfileSkipValidatingPriority": (False, ALPHA), "MultiQuotaTree": (False, ALPHA),
    "ElasticQuotaIgnorePodOverhead": (False, ALPHA), "ElasticQuotaGuaranteeUsage": (False, ALPHA),
    "ElasticQuotaEnableUpdateResourceKey": (False, ALPHA), "ElasticQuotaEvaluationTransformPod": (False, ALPHA),
    "DisableDefaultQuota": (False, ALPHA), "SupportParentQuotaSubmitPod": (False, ALPHA),
    "EnableQuotaAdmission": (False, ALPHA), "EnableQuotaAdmissionOnUpdate": (False, ALPHA),
    "EnableSyncGPUSharedResource": (False, ALPHA), "ColocationProfileController": (False, ALPHA),
    "ValidatePodDeviceResource": (False, ALPHA), "EnablePodEnhancedValidator": (False, ALPHA),
    "DisableExtendedResourceSpec": (False, ALPHA), "DisableDeviceResourceSpec": (False, ALPHA),
    "BindingAdmissionWebhook": (False, ALPHA),
    # defaultDeschedulerFeatureGates
    DISABLE_PVC_RESERVATION: (False, BETA),
    # transformerFeatureGates
    "PriorityTransformer": (False, ALPHA), "PreemptionPolicyTransformer": (False, ALPHA),
    "ReplaceResourcesTransformer": (False, ALPHA),
}
"""gate → (default, pre-release stage)."""

NOT_BUILT: dict[str, str] = {
    "PriorityTransformer": "pods' priorities are read as they are (upstream's pod transformer is not built)",
    "PreemptionPolicyTransformer": "pods' preemption policies are read as they are (upstream's pod transformer is "
                                   "not built)",
    "ReplaceResourcesTransformer": "pods' resources are read as they are (upstream's pod transformer is not built)",
}
"""The gates upstream's descheduler acts on whose feature koord-descheduler lacks: gate → what happens instead."""

_ALL = {"AllAlpha": ALPHA, "AllBeta": BETA}  # component-base's own gates: every gate of that stage
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # strconv.ParseBool
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True)
class FeatureGates:
    """Each gate's value: set on the command line (`given`), else by AllAlpha/AllBeta, else its default."""

    given: Mapping[str, bool] = field(default_factory=dict)

    def enabled(self, gate: str) -> bool:
        if gate in self.given:
            return self.given[gate]
        default, stage = GATES[gate]
        for group, group_stage in _ALL.items():
            if group in self.given and stage == group_stage:
                return self.given[group]
        return default

    def not_built_on(self) -> list[str]:
        """The gates on whose feature koord-descheduler lacks, as `Gate=true: what happens instead`."""
        return [f"{gate}=true: {why}" for gate, why in NOT_BUILT.items() if self.enabled(gate)]


def parse_feature_gates(text: str | None) -> FeatureGates:
    """`--feature-gates A=true,B=false` as component-base reads it (comma-separated, spaces trimmed, Go booleans);
    ValueError in one line on a malformed pair, a bad boolean or a gate upstream does not know."""
    given: dict[str, bool] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep:
            raise ValueError(f"--feature-gates: malformed pair, expect string=bool: {item!r}")
        if value not in _TRUE | _FALSE:
            raise ValueError(f"--feature-gates: invalid value of {name}={value}, want true or false")
        if name not in GATES and name not in _ALL:
            raise ValueError(f"--feature-gates: unrecognized feature gate: {name}")
        given[name] = value in _TRUE
    return FeatureGates(given)

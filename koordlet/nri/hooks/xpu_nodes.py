"""The host device nodes of Ascend and Cambricon cards, and the vendor they reveal: facts the node reader and the
device-inject hook share."""

from __future__ import annotations

from collections.abc import Mapping

from koordlet.nri.hooks.model import DeviceNode

VENDOR_HUAWEI = "huawei"  # node.koordinator.sh/gpu-vendor values (koordlet.devices.vendors)
VENDOR_CAMBRICON = "cambricon"

ASCEND_VISIBLE_DEVICES = "ASCEND_VISIBLE_DEVICES"
ASCEND_MANAGER = "/dev/davinci_manager"
ASCEND_OPTIONAL = ("/dev/hisi_hdc", "/dev/devmm_svm")
ASCEND_CARD = "/dev/davinci{}"

CAMBRICON_VISIBLE_DEVICES = "CAMBRICON_VISIBLE_DEVICES"
CAMBRICON_NODE_OPTIONAL = ("/dev/cambricon_ctl", "/dev/cambricon_gdr")
CAMBRICON_CARD_OPTIONAL = ("/dev/cambr-msgq:{}", "/dev/cambr-rpc:{}", "/dev/cmsg_ctrl{}", "/dev/commu{}",
                           "/dev/cambricon_ipcm{}")
CAMBRICON_CARD = "/dev/cambricon_dev{}"

# Names directly under the dev root that NodeFactsReader reads (with every node of /dev/infiniband).
DEV_NAME_PREFIXES = ("davinci", "hisi_hdc", "devmm_svm", "cambricon_", "cambr-", "cmsg_ctrl", "commu")


def detect_vendor(dev_nodes: Mapping[str, DeviceNode]) -> str:
    """The vendor whose management nodes the host has, when no Device inventory says otherwise."""
    if ASCEND_MANAGER in dev_nodes:
        return VENDOR_HUAWEI
    if any(p.startswith("/dev/cambricon_dev") for p in dev_nodes):
        return VENDOR_CAMBRICON
    return ""

"""Model names of RDMA-capable PCI functions by vendor and device id, as `lspci` prints them."""

from __future__ import annotations

# The PCI ID Repository (pci.ids), vendor 15b3 Mellanox Technologies: the ConnectX generations and the BlueField
# NICs whose functions carry an InfiniBand device (mlx5_core). VFs have ids of their own.
_NAMES: dict[tuple[str, str], str] = {
    ("15b3", "1013"): "MT27700 Family [ConnectX-4]",
    ("15b3", "1015"): "MT27710 Family [ConnectX-4 Lx]",
    ("15b3", "1016"): "MT27710 Family [ConnectX-4 Lx Virtual Function]",
    ("15b3", "1017"): "MT27800 Family [ConnectX-5]",
    ("15b3", "1018"): "MT27800 Family [ConnectX-5 Virtual Function]",
    ("15b3", "1019"): "MT28800 Family [ConnectX-5 Ex]",
    ("15b3", "101b"): "MT28908 Family [ConnectX-6]",
    ("15b3", "101c"): "MT28908 Family [ConnectX-6 Virtual Function]",
    ("15b3", "101d"): "MT2892 Family [ConnectX-6 Dx]",
    ("15b3", "101e"): "ConnectX Family mlx5Gen Virtual Function",
    ("15b3", "101f"): "MT2894 Family [ConnectX-6 Lx]",
    ("15b3", "1021"): "MT2910 Family [ConnectX-7]",
    ("15b3", "1023"): "CX8 Family [ConnectX-8]",
    ("15b3", "a2d6"): "MT42822 BlueField-2 integrated ConnectX-6 Dx network controller",
    ("15b3", "a2dc"): "MT43244 BlueField-3 integrated ConnectX-7 network controller",
}


def model_name(vendor: str, device: str) -> str:
    """The device's name, else `vendor:device` (lspci -n's form) for an id not listed; "" when either is unknown."""
    if not vendor or not device:
        return ""
    return _NAMES.get((vendor, device), f"{vendor}:{device}")

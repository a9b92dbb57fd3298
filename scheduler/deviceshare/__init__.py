"""DeviceShare: GPU/RDMA/FPGA request normalisation, per-minor accounting, allocation and the DeviceShare plugin."""

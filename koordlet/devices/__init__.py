"""Device discovery (NVIDIA, xPU device-info files, RDMA) and the Device CR built from it."""

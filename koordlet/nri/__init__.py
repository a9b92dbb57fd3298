"""The NRI plugin: koordlet registers with containerd/CRI-O as `koordlet_nri` and adjusts containers at creation.

Layers, each knowing only the one below: `mux` (one Unix connection, two byte streams) → `ttrpc` (framed unary
calls on a byte stream) → `plugin` (NRI messages, pod/container state from the runtime, reconnect) → `hooks` (pure
functions from pod, container and node facts to an adjustment; they never see protobuf or sockets).
"""

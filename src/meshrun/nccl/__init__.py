"""The network policy for NCCL and gloo (which interface, InfiniBand, timeouts by node count)
and the lint of the NCCL/TORCH_NCCL environment. Pure (docs/network.md)."""

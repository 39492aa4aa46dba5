"""Tensor.record_stream and CUDA graphs with gpumem as PyTorch's allocator."""


def set_hooks(pluggable, library, conf):
    """Sets the record-stream and private-pool hooks of `pluggable` (a CUDAPluggableAllocator over `library`)."""

"""gpumem as PyTorch's CUDA allocator, with PyTorch's memory tools (statistics, empty_cache, memory fraction,
allocation history) answered by gpumem."""

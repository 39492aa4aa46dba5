"""Tensor.record_stream and CUDA graphs with gpumem as PyTorch's allocator.

``set_hooks`` gives PyTorch's pluggable allocator the hooks of libgpumem_torch_allocator.so that its own caching
allocator would otherwise answer:

- ``Tensor.record_stream(s)``: the tensor's memory is freed after the work queued on ``s`` until its free (a stream
  wait, no host synchronisation). Without the hook PyTorch silently ignores record_stream with a pluggable
  allocator, and the memory could be handed out again while ``s`` still reads it. Configuration key
  ``record_stream``: ``order`` (the default) or ``error`` (record_stream raises, for programs that synchronise
  their streams themselves).
- ``torch.cuda.graph`` and ``make_graphed_callables``: a capture allocates from a private pool (one per graph,
  or the one ``pool=`` names), which eager tensors never reuse and which goes back to the device when its graphs
  are reset and its tensors freed (at ``torch.cuda.empty_cache()`` at the latest).
- ``torch.compile(mode="reduce-overhead")``: inductor's CUDA graph trees need PyTorch's allocator checkpoints,
  which a pluggable allocator cannot provide (PyTorch raises "pluggable does not yet support
  checkPoolLiveAllocations"), so with ``cudagraph_trees`` = ``off`` (the default) the trees are turned off and
  inductor captures with ``torch.cuda.graph``, which the pool hooks serve; ``keep`` leaves PyTorch's setting.
"""

import ctypes

from .. import _gpumem

RECORD_STREAM_MODES = ("order", "error")
CUDAGRAPH_TREES_MODES = ("off", "keep")

_POOL_HOOKS = (
    ("set_begin_allocate_to_pool", "gpumem_torch_begin_allocate_to_pool"),
    ("set_end_allocate_to_pool_fn", "gpumem_torch_end_allocate_to_pool"),
    ("set_release_pool", "gpumem_torch_release_pool"),
)

_trees_turned_off_logged = False


def _address(library, name):
    """The address (an int) of `library`'s exported function `name`, or None when it exports none."""
    try:
        function = getattr(library, name)
    except AttributeError:
        return None
    return ctypes.cast(function, ctypes.c_void_p).value


def _choice(conf, key, default, choices):
    value = conf.get(key, default)
    if value not in choices:
        raise ValueError(f"GPUMEM_TORCH_ALLOC_CONF: {key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def set_hooks(pluggable, library, conf):
    """Sets the record-stream and private-pool hooks of `pluggable` (a CUDAPluggableAllocator over `library`).

    `pluggable` is a ``torch.cuda.memory.CUDAPluggableAllocator`` (or its ``allocator()``, PyTorch's
    ``_CUDAPluggableAllocator``), `library` the ctypes handle of libgpumem_torch_allocator.so with gpumem's hooks
    installed, `conf` the parsed configuration (a mapping; keys ``record_stream``: ``order``|``error`` and
    ``cudagraph_trees``: ``off``|``keep``). The pool hooks are set only when the library exports them (it does when
    it was built with PyTorch). Call it before the allocator is given to ``change_current_allocator``.

    Raises ValueError for a value outside those choices (nothing is changed then).
    """
    record_stream = _choice(conf, "record_stream", "order", RECORD_STREAM_MODES)
    trees = _choice(conf, "cudagraph_trees", "off", CUDAGRAPH_TREES_MODES)
    native = pluggable.allocator() if hasattr(pluggable, "allocator") else pluggable
    native.set_record_stream_fn(_address(library, "gpumem_torch_record_stream"))
    for setter, name in _POOL_HOOKS:
        address = _address(library, name)
        if address is not None:
            getattr(native, setter)(address)
    _gpumem._torch_record_stream_mode(record_stream)
    if trees == "off":
        _turn_cudagraph_trees_off()


def _turn_cudagraph_trees_off():
    """inductor's cudagraph trees off (reduce-overhead then captures with torch.cuda.graph); logged once."""
    global _trees_turned_off_logged
    import torch._inductor.config as inductor_config

    if not inductor_config.triton.cudagraph_trees:
        return
    inductor_config.triton.cudagraph_trees = False
    if not _trees_turned_off_logged:
        _trees_turned_off_logged = True
        _gpumem._torch_log_info(
            "gpumem.torch: torch._inductor.config.triton.cudagraph_trees set to False: CUDA graph trees need "
            "PyTorch's allocator checkpoints, which a pluggable allocator cannot provide; torch.compile("
            "mode='reduce-overhead') captures with torch.cuda.graph instead (GPUMEM_TORCH_ALLOC_CONF="
            "cudagraph_trees:keep leaves the setting alone)"
        )

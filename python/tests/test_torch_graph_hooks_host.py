"""gpumem.torch._graphs.set_hooks on any machine, with stand-ins for PyTorch's pluggable allocator and inductor's
configuration (no PyTorch needed): which hooks it sets, the record_stream mode it applies, and cudagraph trees
turned off (logged once) or kept."""

import ctypes
import sys
import types

import pytest

import gpumem
import gpumem.allocators.torch as torch_allocators
from gpumem import logger
from gpumem.torch import _graphs
from torch_hooks_table import hooks_table

INVALID_VALUE = 3


class FakePluggable:
    """Records the setter calls of torch.cuda.memory.CUDAPluggableAllocator's allocator()."""

    def __init__(self):
        self.calls = {}
        native = self

        class Native:
            def __getattr__(self, name):
                return lambda address: native.calls.__setitem__(name, address)

        self._native = Native()

    def allocator(self):
        return self._native


@pytest.fixture
def inductor(monkeypatch):
    """A stand-in torch._inductor.config with triton.cudagraph_trees = True."""
    config = types.ModuleType("torch._inductor.config")
    config.triton = types.SimpleNamespace(cudagraph_trees=True)
    inductor_package = types.ModuleType("torch._inductor")
    inductor_package.config = config
    torch = types.ModuleType("torch")
    torch._inductor = inductor_package
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._inductor", inductor_package)
    monkeypatch.setitem(sys.modules, "torch._inductor.config", config)
    monkeypatch.setattr(_graphs, "_trees_turned_off_logged", False)
    yield config
    gpumem._gpumem._torch_record_stream_mode("order")


@pytest.fixture
def library():
    return torch_allocators._installed_library()


def test_set_hooks_sets_record_stream_and_the_pool_hooks_the_library_exports(inductor, library):
    pluggable = FakePluggable()
    _graphs.set_hooks(pluggable, library, {})
    expected = ctypes.cast(library.gpumem_torch_record_stream, ctypes.c_void_p).value
    assert pluggable.calls["set_record_stream_fn"] == expected
    pool_setters = {"set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool"}
    if library.gpumem_torch_built_with_torch():
        assert pool_setters <= set(pluggable.calls)
        assert pluggable.calls["set_release_pool"] == ctypes.cast(library.gpumem_torch_release_pool,
                                                                  ctypes.c_void_p).value
    else:  # built without PyTorch: the pool hooks (C++ signatures) are not exported
        assert not pool_setters & set(pluggable.calls)


def test_record_stream_error_mode_reaches_the_hooks(inductor, library):
    hooks = hooks_table()
    _graphs.set_hooks(FakePluggable(), library, {"record_stream": "error"})
    assert hooks.record_stream(None, None) == INVALID_VALUE
    assert "record_stream:error" in hooks.error()
    _graphs.set_hooks(FakePluggable(), library, {"record_stream": "order"})
    assert hooks.record_stream(None, None) == INVALID_VALUE
    assert "not a live allocation" in hooks.error()


def test_cudagraph_trees_are_turned_off_by_default_and_that_is_logged_once(inductor, library, capfd):
    previous = logger.get_logging_level()
    logger.set_logging_level(logger.level_enum.info)
    try:
        _graphs.set_hooks(FakePluggable(), library, {})
        assert inductor.triton.cudagraph_trees is False
        inductor.triton.cudagraph_trees = True
        _graphs.set_hooks(FakePluggable(), library, {"cudagraph_trees": "off"})
        assert inductor.triton.cudagraph_trees is False
        logger.flush_logger()
    finally:
        logger.set_logging_level(previous)
    err = capfd.readouterr().err
    assert err.count("cudagraph_trees set to False") == 1, err


def test_cudagraph_trees_keep_leaves_pytorchs_setting(inductor, library):
    _graphs.set_hooks(FakePluggable(), library, {"cudagraph_trees": "keep"})
    assert inductor.triton.cudagraph_trees is True


def test_bad_values_are_value_errors_naming_the_key_and_change_nothing(inductor, library):
    pluggable = FakePluggable()
    with pytest.raises(ValueError, match="record_stream must be one of order, error, got 'later'"):
        _graphs.set_hooks(pluggable, library, {"record_stream": "later"})
    with pytest.raises(ValueError, match="cudagraph_trees must be one of off, keep"):
        _graphs.set_hooks(pluggable, library, {"cudagraph_trees": "on"})
    assert pluggable.calls == {} and inductor.triton.cudagraph_trees is True

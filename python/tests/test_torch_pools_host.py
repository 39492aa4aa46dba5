"""Private pools of CUDA graphs through gpumem's allocator hooks table (pool_begin / alloc2 / free2 / pool_end /
pool_release), on the host backend or a GPU, without PyTorch: a pool's blocks never go to another pool, a block freed
after the capture stays in its pool, the memory goes back only when the pool is released and empty, and inside a
global-mode capture the pool's calls leave the capture valid."""

import pytest

import gpumem
from gpumem import cuda, mr
from torch_hooks_table import hooks_table

INVALID_VALUE = 3
SIZE = 1 << 20
DEVICE = 0


@pytest.fixture
def hooks(current_resource):
    mr.set_current_device_resource(mr.VmmPoolMemoryResource())
    table = hooks_table()
    yield table
    assert gpumem._gpumem._torch_held_frees() == 0


def pools():
    return {tuple(p["id"]): p for p in gpumem._gpumem._torch_private_pools() if p["device"] == DEVICE}


def begin(hooks, pool):
    assert hooks.pool_begin(DEVICE, *pool) == 0, hooks.error()


def end(hooks, pool):
    assert hooks.pool_end(DEVICE, *pool) == 0, hooks.error()


def release(hooks, pool):
    assert hooks.pool_release(DEVICE, *pool) == 0, hooks.error()


def alloc(hooks, stream, pool=(0, 0), size=SIZE):
    status, ptr = hooks.alloc(size, DEVICE, stream.ptr, pool)
    assert status == 0, hooks.error()
    return ptr


def free(hooks, ptr, stream, size=SIZE):
    assert hooks.free2(ptr, size, DEVICE, stream.ptr) == 0, hooks.error()


def test_a_pools_blocks_never_go_to_the_device_resource_or_another_pool(hooks):
    s = cuda.Stream(non_blocking=True)
    a, b = (1, 11), (1, 12)
    begin(hooks, a)
    in_a = [alloc(hooks, s, a) for _ in range(3)]
    end(hooks, a)
    for ptr in in_a:
        free(hooks, ptr, s)
    assert pools()[a]["live_blocks"] == 0 and pools()[a]["physical_bytes"] > 0
    eager = [alloc(hooks, s) for _ in range(6)]
    begin(hooks, b)
    in_b = [alloc(hooks, s, b) for _ in range(6)]
    end(hooks, b)
    assert not set(in_a) & (set(eager) | set(in_b))
    # The same pool does reuse its own blocks, in the next capture that allocates to it.
    begin(hooks, a)
    again = alloc(hooks, s, a)
    end(hooks, a)
    assert again in in_a
    for ptr in eager:
        free(hooks, ptr, s)
    for ptr in in_b + [again]:
        free(hooks, ptr, s)
    release(hooks, a)
    release(hooks, a)
    release(hooks, b)
    assert a not in pools() and b not in pools()


def test_memory_goes_back_only_when_the_pool_is_released_and_empty(hooks):
    s = cuda.Stream(non_blocking=True)
    pool = (2, 1)
    begin(hooks, pool)
    ptr = alloc(hooks, s, pool)
    end(hooks, pool)
    begin(hooks, pool)  # a second graph shares the pool (pool=g1.pool())
    end(hooks, pool)
    assert pools()[pool]["use_count"] == 2
    release(hooks, pool)
    assert pools()[pool]["physical_bytes"] > 0
    release(hooks, pool)
    assert pools()[pool]["use_count"] == 0, "a live block keeps the released pool"
    assert gpumem._gpumem._torch_private_pools()
    free(hooks, ptr, s)  # its last block: the pool goes back to the device
    assert pool not in pools()


def test_a_pool_in_use_by_its_graph_is_kept_after_its_blocks_are_freed(hooks):
    s = cuda.Stream(non_blocking=True)
    pool = (2, 2)
    begin(hooks, pool)
    ptr = alloc(hooks, s, pool)
    end(hooks, pool)
    free(hooks, ptr, s)
    assert pools()[pool]["use_count"] == 1, "in use by its graph: kept"
    release(hooks, pool)
    assert pool not in pools()


def test_the_pool_calls_refuse_unknown_pools_by_id(hooks):
    s = cuda.Stream(non_blocking=True)
    status, ptr = hooks.alloc(SIZE, DEVICE, s.ptr, (9, 9))
    assert status == INVALID_VALUE and ptr is None
    assert "private pool (9, 9) of device 0" in hooks.error()
    assert hooks.pool_end(DEVICE, 9, 9) == INVALID_VALUE and "(9, 9)" in hooks.error()
    assert hooks.pool_release(DEVICE, 9, 9) == INVALID_VALUE and "(9, 9)" in hooks.error()
    assert hooks.pool_begin(DEVICE, 0, 0) == INVALID_VALUE and "(0, 0)" in hooks.error()
    pool = (3, 1)
    begin(hooks, pool)
    end(hooks, pool)
    assert hooks.pool_end(DEVICE, *pool) == INVALID_VALUE and "not capturing" in hooks.error()
    release(hooks, pool)
    assert hooks.pool_release(DEVICE, *pool) == INVALID_VALUE
    status, _ = hooks.alloc(SIZE, DEVICE, s.ptr, pool)
    assert status == INVALID_VALUE, "a released pool takes no allocation"


def test_pool_allocations_and_frees_inside_a_global_capture_leave_it_valid(hooks):
    s = cuda.Stream(non_blocking=True)
    other = cuda.Stream(non_blocking=True)
    eager = alloc(hooks, other)  # a (0, 0) block, freed during the capture
    pool = (4, 1)
    begin(hooks, pool)
    s.begin_capture(mode="global")
    first = alloc(hooks, s, pool)
    free(hooks, first, s)
    again = alloc(hooks, s, pool)
    assert again == first, "a block freed on the capture's stream is reused in the capture"
    big = alloc(hooks, s, pool, size=64 << 20)  # the pool grows during the capture
    free(hooks, eager, other)  # held back: the device resource's free may record or query events
    assert gpumem._gpumem._torch_held_frees() == 1
    graph = s.end_capture()
    assert graph is not None
    end(hooks, pool)
    assert gpumem._gpumem._torch_held_frees() == 0
    free(hooks, again, s)
    free(hooks, big, s, size=64 << 20)
    release(hooks, pool)
    assert pool not in pools()


def test_a_free_from_another_stream_during_a_capture_is_held_until_pool_end(hooks):
    s = cuda.Stream(non_blocking=True)
    side = cuda.Stream(non_blocking=True)
    pool = (5, 1)
    begin(hooks, pool)
    s.begin_capture(mode="global")
    ptr = alloc(hooks, s, pool)
    free(hooks, ptr, side)  # another stream than the block's: never reused within the capture
    assert pools()[pool]["held_frees"] == 1
    second = alloc(hooks, s, pool)
    assert second != ptr
    s.end_capture()
    assert pools()[pool]["held_frees"] == 1
    end(hooks, pool)
    assert pools()[pool]["held_frees"] == 0 and pools()[pool]["live_blocks"] == 1
    release(hooks, pool)
    assert pools()[pool]["use_count"] == 0
    free(hooks, second, s)
    assert pool not in pools()


def test_without_a_capture_a_free_from_another_stream_returns_the_block_at_once(hooks):
    s = cuda.Stream(non_blocking=True)
    side = cuda.Stream(non_blocking=True)
    pool = (5, 2)
    begin(hooks, pool)
    end(hooks, pool)
    begin(hooks, pool)
    ptr = alloc(hooks, s, pool)
    end(hooks, pool)
    free(hooks, ptr, side)
    assert pools()[pool]["held_frees"] == 0 and pools()[pool]["live_blocks"] == 0
    release(hooks, pool)
    release(hooks, pool)
    assert pool not in pools()


def test_releasing_idle_pools_trims_a_released_pool_that_keeps_a_live_block(hooks):
    s = cuda.Stream(non_blocking=True)
    pool = (6, 1)
    begin(hooks, pool)
    big = alloc(hooks, s, pool, size=64 << 20)
    small = alloc(hooks, s, pool)
    end(hooks, pool)
    free(hooks, big, s, size=64 << 20)
    release(hooks, pool)
    before = pools()[pool]["physical_bytes"]
    assert gpumem._gpumem._torch_release_idle_pools(DEVICE) >= 32 << 20
    assert 0 < pools()[pool]["physical_bytes"] <= before - (32 << 20)
    free(hooks, small, s)
    assert pool not in pools()
    assert gpumem._gpumem._torch_release_idle_pools() == 0


def test_a_pool_released_during_another_capture_goes_when_that_capture_ends(hooks):
    s = cuda.Stream(non_blocking=True)
    done, busy = (7, 1), (7, 2)
    begin(hooks, done)
    ptr = alloc(hooks, s, done)
    end(hooks, done)
    free(hooks, ptr, s)
    begin(hooks, busy)
    s.begin_capture(mode="global")
    release(hooks, done)  # destroying it would synchronise the device: not during a global capture
    assert gpumem._gpumem._torch_release_idle_pools() == 0
    assert done in pools()
    s.end_capture()
    end(hooks, busy)
    assert done not in pools()
    release(hooks, busy)
    assert busy not in pools()

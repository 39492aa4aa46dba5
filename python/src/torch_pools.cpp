// Private pools of CUDA graphs (torch_hooks.hpp), as PyTorch's caching allocator keeps them: the memory of a
// captured graph comes from a pool of its own (or one shared by pool=), which eager allocations never touch, and
// which outlives the blocks freed after the capture (replays still write them).
//
// A pool is keyed by (device, pool id) and holds its own vmm_pool_memory_resource (reservation: the device's total
// memory; no release threshold, so nothing is unmapped during a capture), a use count (pool_begin increfs,
// pool_release decrefs), and its live blocks. Every allocation and free of a pool's resource passes ONE fixed
// stream, the legacy default stream, which the resource treats as outliving its calls: same-stream reuse needs no
// event, so the pool records, waits on and queries no event and touches no stream while capturing; growth maps
// physical memory (cuMemCreate/cuMemMap), which a capture allows. A free that names another stream than the block's
// allocation stream, while a capture is underway on the device, is held back until pool_end, so a capture over
// several streams never reuses a block across them.
//
// A pool goes back to the device (after a device synchronisation: replays may still run) once its use count is 0
// and it has no live block, and never while a capture is underway (on any device: global mode forbids the
// synchronisation process-wide): at pool_release, at the free of its last block, at pool_end, or by
// release_idle_pools (empty_cache, out of memory), which also gives back the wholly free slabs of released pools
// that still have live blocks (a tensor the program keeps, a cuBLAS workspace allocated during a capture).
//
// Captures: pool_begin to pool_end is a capture underway (torch_capture.hpp); at the last pool_end the (0, 0) frees
// held back meanwhile are carried out (torch_streams.cpp).
//
// Cost: one mutex for every pool call. pool_deallocate, on every free2, first loads one atomic (the number of live
// private-pool blocks) and returns at once when it is 0; otherwise a hash-map lookup under the mutex. A pool's own
// allocate and free are the VMM pool's (one more mutex, O(log n)); destroying a pool synchronises its device.
#include "registry.hpp"
#include "torch_capture.hpp"
#include "torch_hooks.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/debug_log.hpp>
#include <gpumem/device.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem::python::torch_hooks {
namespace {

/** @brief The one stream every private pool's resource is given (see the file comment). */
cuda_stream_view const pool_stream{};

struct private_pool {
  int device{};
  pool_id id{};
  std::unique_ptr<mr::vmm_pool_memory_resource> resource;
  int use_count{};                                     ///< pool_begin minus pool_release
  int captures{};                                      ///< pool_begin minus pool_end
  std::size_t live{};                                  ///< live blocks
  std::vector<std::pair<void*, std::size_t>> held;     ///< cross-stream frees during a capture, until pool_end
};

struct block {
  private_pool* pool;
  std::size_t size;
  cudaStream_t stream;  ///< as alloc2 named it
};

using key = std::tuple<int, std::uint64_t, std::uint64_t>;

std::mutex mutex;
std::map<key, std::unique_ptr<private_pool>> pools;  // guarded by mutex
std::unordered_map<void*, block> blocks;              // guarded by mutex: every live block of every pool
std::unordered_map<int, int> device_captures;         // guarded by mutex: captures underway, by device
std::atomic<std::size_t> live_blocks{0};              // blocks.size(), for pool_deallocate's test
std::atomic<int> captures_underway{0};                // the sum of device_captures

std::string describe(int device, pool_id id)
{
  return "private pool (" + std::to_string(id.a) + ", " + std::to_string(id.b) + ") of device " +
         std::to_string(device);
}

bool device_capturing(int device)  // with mutex held
{
  auto const found = device_captures.find(device);
  return found != device_captures.end() && found->second > 0;
}

bool idle(private_pool const& pool) { return pool.use_count <= 0 && pool.live == 0 && pool.held.empty(); }

/**
 * @brief Removes the idle pools of `device` (< 0: all), for destroy(); none while any capture is underway, since
 * destroy() synchronises a device, which a global-mode capture on any device forbids.
 */
std::vector<std::unique_ptr<private_pool>> take_idle(int device)  // with mutex held
{
  std::vector<std::unique_ptr<private_pool>> taken;
  if (captures_underway.load(std::memory_order_acquire) > 0) { return taken; }
  for (auto it = pools.begin(); it != pools.end();) {
    private_pool const& pool = *it->second;
    if ((device < 0 || pool.device == device) && idle(pool)) {
      taken.push_back(std::move(it->second));
      it = pools.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

/** @brief Synchronises each pool's device (replays may still use the memory), then destroys it. @return its bytes. */
std::size_t destroy(std::vector<std::unique_ptr<private_pool>> taken) noexcept
{
  std::size_t bytes = 0;
  for (auto& pool : taken) {
    try {
      cuda_set_device_raii const on_device{cuda_device_id{pool->device}};
      synchronize_device();
      bytes += pool->resource->physical_bytes();
      pool->resource.reset();
    } catch (std::exception const& e) {  // the device failed: give the memory up rather than free it under work
      gpumem::detail::log(log_level::error, std::string{"gpumem.torch: destroying a private pool failed, its memory is left: "} +
                              e.what());
      (void)pool->resource.release();
    }
  }
  return bytes;
}

/** @brief Frees `ptr` of `pool` into its resource (with mutex held). */
void free_in_pool(private_pool& pool, void* ptr, std::size_t size)
{
  pool.resource->deallocate(ptr, size, pool_stream);
}

}  // namespace

bool capture_underway() noexcept { return captures_underway.load(std::memory_order_acquire) > 0; }

bool pool_block_is_live(void const* ptr) noexcept
{
  if (live_blocks.load(std::memory_order_acquire) == 0) { return false; }
  std::scoped_lock const lock{mutex};
  return blocks.contains(const_cast<void*>(ptr));
}

gpumem_status pool_allocate(int device, pool_id pool, std::size_t size, void* stream, void** out) noexcept
{
  *out = nullptr;
  try {
    std::scoped_lock const lock{mutex};
    auto const found = pools.find({device, pool.a, pool.b});
    if (found == pools.end() || found->second->use_count <= 0) {
      return fail(GPUMEM_ERROR_INVALID_VALUE,
                  ("alloc2: " + describe(device, pool) + " was not made by pool_begin (or was released)").c_str());
    }
    private_pool& owner = *found->second;
    void* const ptr = owner.resource->allocate(size, pool_stream);
    try {
      blocks.emplace(ptr, block{&owner, size, static_cast<cudaStream_t>(stream)});
    } catch (...) {
      owner.resource->deallocate(ptr, size, pool_stream);
      throw;
    }
    ++owner.live;
    live_blocks.store(blocks.size(), std::memory_order_release);
    *out = ptr;
  } catch (...) {
    return fail_with_current_exception();
  }
  return GPUMEM_SUCCESS;
}

bool pool_deallocate(void* ptr, std::size_t, void* stream, gpumem_status* status) noexcept
{
  if (live_blocks.load(std::memory_order_acquire) == 0) { return false; }
  std::vector<std::unique_ptr<private_pool>> idle_pools;
  {
    std::scoped_lock const lock{mutex};
    auto const found = blocks.find(ptr);
    if (found == blocks.end()) { return false; }
    block const b = found->second;
    blocks.erase(found);
    live_blocks.store(blocks.size(), std::memory_order_release);
    private_pool& pool = *b.pool;
    --pool.live;
    *status = GPUMEM_SUCCESS;
    if (static_cast<cudaStream_t>(stream) != b.stream && device_capturing(pool.device)) {
      try {
        pool.held.emplace_back(ptr, b.size);
      } catch (...) {  // no memory to hold it: keep the block out of use rather than reuse it too early
        *status = fail_with_current_exception();
      }
      return true;
    }
    free_in_pool(pool, ptr, b.size);
    if (idle(pool)) { idle_pools = take_idle(pool.device); }
  }
  (void)destroy(std::move(idle_pools));
  return true;
}

gpumem_status pool_begin(int device, pool_id pool) noexcept
{
  if (pool.is_default()) {
    return fail(GPUMEM_ERROR_INVALID_VALUE, "pool_begin: (0, 0) is the device's resource, not a private pool");
  }
  try {
    std::scoped_lock const lock{mutex};
    auto& slot = pools[{device, pool.a, pool.b}];
    if (slot == nullptr) {
      try {
        cuda_set_device_raii const on_device{cuda_device_id{device}};
        auto made = std::make_unique<private_pool>();
        made->device = device;
        made->id = pool;
        mr::vmm_pool_options options;
        options.slab_size = std::size_t{2} << 20;  // rounded up to the granularity; graphs are often small
        options.reservation_size = available_device_memory(cuda_device_id{device}).total;
        made->resource = std::make_unique<mr::vmm_pool_memory_resource>(options);
        slot = std::move(made);
      } catch (...) {
        pools.erase({device, pool.a, pool.b});
        throw;
      }
    }
    ++slot->use_count;
    ++slot->captures;
    ++device_captures[device];
    captures_underway.fetch_add(1, std::memory_order_acq_rel);
  } catch (...) {
    return fail_with_current_exception();
  }
  return GPUMEM_SUCCESS;
}

gpumem_status pool_end(int device, pool_id pool) noexcept
{
  std::vector<std::unique_ptr<private_pool>> idle_pools;
  bool none_capturing = false;
  try {
    std::scoped_lock const lock{mutex};
    auto const found = pools.find({device, pool.a, pool.b});
    if (found == pools.end() || found->second->captures <= 0) {
      return fail(GPUMEM_ERROR_INVALID_VALUE, ("pool_end: " + describe(device, pool) + " is not capturing").c_str());
    }
    --found->second->captures;
    --device_captures[device];
    none_capturing = captures_underway.fetch_sub(1, std::memory_order_acq_rel) == 1;
    if (!device_capturing(device)) {  // the device's captures are over: every pool of it takes its frees
      for (auto& [k, held_pool] : pools) {
        if (held_pool->device != device) { continue; }
        for (auto const& [ptr, size] : held_pool->held) { free_in_pool(*held_pool, ptr, size); }
        held_pool->held.clear();
      }
    }
    idle_pools = take_idle(-1);  // pools left idle while something captured
  } catch (...) {
    return fail_with_current_exception();
  }
  (void)destroy(std::move(idle_pools));
  return none_capturing ? run_held_frees() : GPUMEM_SUCCESS;
}

gpumem_status pool_release(int device, pool_id pool) noexcept
{
  std::vector<std::unique_ptr<private_pool>> idle_pools;
  try {
    std::scoped_lock const lock{mutex};
    auto const found = pools.find({device, pool.a, pool.b});
    if (found == pools.end() || found->second->use_count <= 0) {
      return fail(GPUMEM_ERROR_INVALID_VALUE,
                  ("pool_release: " + describe(device, pool) + " is not in use (pool_begin made no such pool)").c_str());
    }
    if (--found->second->use_count == 0 && idle(*found->second)) { idle_pools = take_idle(device); }
  } catch (...) {
    return fail_with_current_exception();
  }
  (void)destroy(std::move(idle_pools));
  return GPUMEM_SUCCESS;
}

std::size_t release_idle_pools(int device) noexcept
{
  std::vector<std::unique_ptr<private_pool>> idle_pools;
  std::size_t trimmed = 0;
  try {
    std::scoped_lock const lock{mutex};
    idle_pools = take_idle(device);
    // A released pool that still has live blocks (a tensor the program keeps, a cuBLAS workspace allocated during
    // its capture) gives back its wholly free slabs, as PyTorch's empty_cache frees a released pool's free segments.
    if (captures_underway.load(std::memory_order_acquire) == 0) {
      for (auto& [k, pool] : pools) {
        if ((device >= 0 && pool->device != device) || pool->use_count > 0) { continue; }
        cuda_set_device_raii const on_device{cuda_device_id{pool->device}};
        synchronize_device();  // replays of its graphs may still run
        trimmed += pool->resource->release_unused();
      }
    }
  } catch (std::exception const& e) {
    gpumem::detail::log(log_level::error, std::string{"gpumem.torch: releasing idle private pools failed: "} + e.what());
  }
  return trimmed + destroy(std::move(idle_pools));
}

namespace {

registration const pools_binding{binding_order::allocators, "torch_pools", [](py::module_& m) {
  m.def(
    "_torch_private_pools",
    [] {
      py::list out;
      std::scoped_lock const lock{mutex};
      for (auto const& [k, pool] : pools) {
        py::dict d;
        d["device"] = pool->device;
        d["id"] = py::make_tuple(pool->id.a, pool->id.b);
        d["use_count"] = pool->use_count;
        d["capturing"] = pool->captures > 0;
        d["live_blocks"] = pool->live;
        d["held_frees"] = pool->held.size();
        d["physical_bytes"] = pool->resource->physical_bytes();
        out.append(d);
      }
      return out;
    },
    "The private pools of CUDA graphs that gpumem holds for PyTorch: a list of dicts (device, id, use_count, "
    "capturing, live_blocks, held_frees, physical_bytes).");
  m.def(
    "_torch_release_idle_pools", [](int device) { return release_idle_pools(device); }, py::arg("device") = -1,
    py::call_guard<py::gil_scoped_release>(),
    "Gives back the memory of released private pools (torch.cuda.empty_cache does it too): pools without live "
    "blocks go, the others give back their wholly free slabs; nothing while a capture is underway. Returns the "
    "bytes given back. device < 0: every device.");
}};

}  // namespace
}  // namespace gpumem::python::torch_hooks

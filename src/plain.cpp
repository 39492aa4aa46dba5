// The plain API (plain.hpp): alloc/zeros/free over the current device resource, with a registry that
// remembers each live pointer's {size, device, resource hold} (mr::resource_hold: the resource, and its
// owner when it was set by shared_ptr, so that it outlives the pointer).
//
// The registry has 16 shards, each a mutex + hash map, chosen by a hash of the pointer, so threads that
// allocate at once rarely share a lock. Each shard also remembers its last `recently_freed_capacity` freed
// pointers, which turns a double free into a clear "was already freed" error instead of "unknown pointer".
// The registry is leaked on purpose, like the default resources, so frees during process exit still work.
#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/plain.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t shard_count = 16;
constexpr std::size_t recently_freed_capacity = 256;  // per shard: 4096 pointers in all
constexpr std::size_t spare_node_capacity = 64;       // per shard: map nodes kept for reuse

/// Where a live pointer came from: enough to give it back without asking the caller.
struct record {
  std::size_t size{};
  int device{};
  mr::resource_hold hold;  ///< the resource, kept alive here when gpumem shares its ownership
};

enum class lookup_result { live, freed, unknown };

class shard {
 public:
  /// Records a new live pointer with a copy of `rec`. A pointer already recorded (its memory was returned
  /// to the resource behind gpumem's back and handed out again) is overwritten, and the record it had is
  /// left in `rec`. Either way the caller destroys `rec` after the lock (it may hold the last reference to a
  /// resource, whose destruction may take other locks); when this throws, `rec` is unchanged.
  /// @return true when the pointer was not recorded.
  bool insert(void const* ptr, record& rec)
  {
    std::lock_guard lock{mutex_};
    if (auto const existing = live_.find(ptr); existing != live_.end()) {
      std::swap(existing->second, rec);
      return false;
    }
    if (spare_nodes_.empty()) {
      live_.emplace(ptr, rec);
    } else {  // a node of an earlier free: no heap allocation on this path
      auto node = std::move(spare_nodes_.back());
      spare_nodes_.pop_back();
      node.key() = ptr;
      node.mapped() = rec;
      live_.insert(std::move(node));
    }
    return true;
  }

  /// Removes a live pointer and remembers it as freed. @return what the pointer was; `out` when live.
  lookup_result take(void const* ptr, record& out)
  {
    std::lock_guard lock{mutex_};
    auto const it = live_.find(ptr);
    if (it == live_.end()) { return was_freed_locked(ptr) ? lookup_result::freed : lookup_result::unknown; }
    out = std::move(it->second);  // the node keeps no reference to the resource
    auto node = live_.extract(it);
    if (spare_nodes_.size() < spare_nodes_.capacity()) { spare_nodes_.push_back(std::move(node)); }
    recently_freed_[next_freed_] = ptr;
    next_freed_ = (next_freed_ + 1) % recently_freed_capacity;
    return lookup_result::live;
  }

  lookup_result find_size(void const* ptr, std::size_t& size) const
  {
    std::lock_guard lock{mutex_};
    auto const it = live_.find(ptr);
    if (it == live_.end()) { return was_freed_locked(ptr) ? lookup_result::freed : lookup_result::unknown; }
    size = it->second.size;
    return lookup_result::live;
  }

 private:
  /// O(recently_freed_capacity), on error paths only.
  bool was_freed_locked(void const* ptr) const noexcept
  {
    return std::find(recently_freed_.begin(), recently_freed_.end(), ptr) != recently_freed_.end();
  }

  using live_map = std::unordered_map<void const*, record>;

  mutable std::mutex mutex_;
  live_map live_;                                                        // guarded by mutex_
  // Nodes of freed pointers, reused by the next allocations (capacity reserved once: pushing never allocates).
  std::vector<live_map::node_type> spare_nodes_ = [] {
    std::vector<live_map::node_type> v;
    v.reserve(spare_node_capacity);
    return v;
  }();                                                                   // guarded by mutex_
  std::array<void const*, recently_freed_capacity> recently_freed_{};   // guarded by mutex_: a ring
  std::size_t next_freed_{};                                            // guarded by mutex_
};

class registry {
 public:
  /// Records `rec` for `ptr` (see shard::insert: `rec` is left as it was, or with the record it replaced).
  void insert(void const* ptr, record& rec)
  {
    if (shard_of(ptr).insert(ptr, rec)) { live_count_.fetch_add(1, std::memory_order_relaxed); }
  }

  /// Removes `ptr` and returns its record. @throws logic_error naming the pointer when it is not live.
  record take(void const* ptr, char const* caller)
  {
    record rec{};
    lookup_result const result = shard_of(ptr).take(ptr, rec);
    if (result != lookup_result::live) { throw_not_live(ptr, result, caller); }
    live_count_.fetch_sub(1, std::memory_order_relaxed);
    return rec;
  }

  /// @return the size `ptr` was allocated with. @throws logic_error naming the pointer when it is not live.
  std::size_t size_of(void const* ptr, char const* caller) const
  {
    std::size_t size = 0;
    lookup_result const result = shard_of(ptr).find_size(ptr, size);
    if (result != lookup_result::live) { throw_not_live(ptr, result, caller); }
    return size;
  }

  std::size_t live_count() const noexcept { return live_count_.load(std::memory_order_relaxed); }

 private:
  shard& shard_of(void const* ptr) noexcept { return shards_[shard_index(ptr)]; }
  shard const& shard_of(void const* ptr) const noexcept { return shards_[shard_index(ptr)]; }

  static std::size_t shard_index(void const* ptr) noexcept
  {
    // Allocations are 256-byte aligned: drop those zero bits, then take the top bits of a Fibonacci hash.
    std::uint64_t const bits = reinterpret_cast<std::uintptr_t>(ptr) >> 8U;
    return static_cast<std::size_t>((bits * 0x9E3779B97F4A7C15ULL) >> 60U);
  }
  static_assert(shard_count == 16, "shard_index takes the top 4 bits of the hash");

  [[noreturn]] static void throw_not_live(void const* ptr, lookup_result result, char const* caller)
  {
    if (result == lookup_result::freed) {
      throw logic_error(std::string{caller} + ": pointer " + format_pointer(ptr) + " was already freed");
    }
    throw logic_error(std::string{caller} + ": pointer " + format_pointer(ptr) +
                      " was not allocated by gpumem::alloc/zeros (or was freed too long ago to be remembered)");
  }

  std::array<shard, shard_count> shards_{};
  std::atomic<std::size_t> live_count_{0};
};

registry& the_registry()
{
  static auto* const instance = new registry{};  // NOLINT(cppcoreguidelines-owning-memory): leaked on purpose
  return *instance;
}

/// Allocates `size` (> 0) bytes with allocate(resource, size, stream) from the current device's resource and
/// records the pointer with a hold of the resource; nullptr when `allocate` returns it (nothing recorded then).
template <class Allocate>
void* allocate_and_register(std::size_t size, cuda_stream_view stream, Allocate&& allocate)
{
  int const device = detail::get_backend().current_device();
  record rec{size, device, mr::hold_per_device_resource(cuda_device_id{device})};
  mr::device_memory_resource& resource = *rec.hold.resource;
  void* const ptr = allocate(resource, size, stream);
  if (ptr == nullptr) { return nullptr; }
  try {
    the_registry().insert(ptr, rec);
  } catch (...) {
    resource.deallocate(ptr, size, stream);  // (rec still holds the resource)
    throw;
  }
  return ptr;
}

/// Whether the resource of `rec` is known to be alive: held by the record, gpumem's default, or set by raw
/// pointer in a setting that is still in place.
bool resource_is_alive(record const& rec) noexcept
{
  return rec.hold.raw_setting == 0 || mr::is_current_raw_setting(cuda_device_id{rec.device}, rec.hold.raw_setting);
}

[[noreturn]] void throw_resource_replaced(void const* ptr, record const& rec)
{
  throw logic_error("gpumem::free: pointer " + format_pointer(ptr) + " was allocated from a resource set by raw "
                    "pointer on device " + std::to_string(rec.device) + ", which has been replaced since; gpumem "
                    "does not own that resource and cannot know that it is still alive, so the memory is left "
                    "alone (free such memory before replacing the resource, or set the resource with a "
                    "std::shared_ptr, which gpumem keeps alive until its memory is freed)");
}

}  // namespace

void* alloc(std::size_t size, cuda_stream_view stream)
{
  if (size == 0) { return nullptr; }
  return allocate_and_register(size, stream, [](mr::device_memory_resource& r, std::size_t n, cuda_stream_view s) {
    return r.allocate(n, s);
  });
}

void* zeros(std::size_t size, cuda_stream_view stream)
{
  void* const ptr = alloc(size, stream);
  if (ptr == nullptr) { return nullptr; }
  try {
    detail::get_backend().memset_async(ptr, 0, size, stream);
  } catch (...) {
    gpumem::free(ptr, stream);
    throw;
  }
  return ptr;
}

void free(void* ptr, cuda_stream_view stream)
{
  if (ptr == nullptr) { return; }
  registry& reg = the_registry();
  record rec = reg.take(ptr, "gpumem::free");
  if (!resource_is_alive(rec)) { throw_resource_replaced(ptr, rec); }  // forgotten: never touched again
  try {
    cuda_set_device_raii const on_device{cuda_device_id{rec.device}};
    rec.hold.resource->deallocate(ptr, rec.size, stream);
  } catch (...) {
    reg.insert(ptr, rec);  // the device could not be made current: the pointer is still live
    throw;
  }
}  // rec's hold goes last: a resource replaced since is destroyed here when this was its last memory

void* try_alloc_without_blocking(std::size_t size, cuda_stream_view stream)
{
  if (size == 0) { return nullptr; }
  return allocate_and_register(size, stream, [](mr::device_memory_resource& r, std::size_t n, cuda_stream_view s) {
    return r.try_allocate_without_blocking(n, s);
  });
}

bool try_free_without_blocking(void* ptr, cuda_stream_view stream)
{
  if (ptr == nullptr) { return true; }
  // One registry lookup when the block goes into the cache (the common case). The pointer leaves the
  // registry first, so no other thread can be handed the block while it is still recorded; when the
  // resource refuses, it goes back (into the node the take just freed: no allocation).
  registry& reg = the_registry();
  record rec = reg.take(ptr, "gpumem::free");
  bool freed = false;
  try {
    freed = rec.device == detail::get_backend().current_device() &&  // else free() switches devices
            resource_is_alive(rec) &&                                 // else free() reports it
            rec.hold.owner.use_count() != 1 &&  // else this would destroy the resource, which may block
            rec.hold.resource->try_deallocate_without_blocking(ptr, rec.size, stream);
  } catch (...) {
    reg.insert(ptr, rec);
    throw;
  }
  if (!freed) { reg.insert(ptr, rec); }
  return freed;
}

std::size_t allocation_size(void const* ptr) { return the_registry().size_of(ptr, "gpumem::allocation_size"); }

std::size_t live_allocation_count() noexcept { return the_registry().live_count(); }

}  // namespace gpumem

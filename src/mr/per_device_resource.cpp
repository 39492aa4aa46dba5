// Each device's current resource (per_device_resource.hpp).
//
// One slot per device holds its current resource: an atomic pointer, read without a lock (the plain API
// reads it on every allocation). A device whose resource was never set, or was reset, uses its default: a
// cuda_memory_resource created on first use and deliberately never destroyed (as RMM does), so that it
// outlives every other static object that may still free memory during process exit. The mutex serialises
// the writers: setting a resource, and creating a default.
//
// Each setting gets a number, so that a hold of a resource set by raw pointer can later ask whether that
// setting is still in place: a seqlock. `sequence` is odd while a writer changes `current` and `kind`, and
// its even value names the setting; a lock-free reader retries when it changed under it.
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::mr {
namespace {

/// The device count never changes during a process, so it is asked once.
int device_count()
{
  static int const count = detail::get_backend().device_count();
  return count;
}

/// Who keeps a device's current resource alive.
enum class ownership : unsigned char {
  gpumem,  ///< the default resource: never destroyed
  caller,  ///< set by raw pointer: the caller
  shared,  ///< set by shared_ptr: `owner`, and the holds taken from it
};

struct device_slot {
  std::atomic<std::uint64_t> sequence{0};                   // the seqlock (file comment)
  std::atomic<device_memory_resource*> current{nullptr};    // null: the default, not made yet
  std::atomic<ownership> owned_by{ownership::gpumem};
  std::shared_ptr<device_memory_resource> owner;            // guarded by the mutex; set iff owned_by == shared
};

struct resource_registry {
  explicit resource_registry(std::size_t devices) : slots(devices), defaults(devices) {}

  std::mutex mutex;                             // serialises writers
  std::vector<device_slot> slots;               // per device
  std::vector<cuda_memory_resource*> defaults;  // guarded by mutex; never freed
};

/// The registry, leaked on purpose: see the file comment.
resource_registry& registry()
{
  // NOLINTNEXTLINE(cppcoreguidelines-owning-memory)
  static auto* const instance = new resource_registry{static_cast<std::size_t>(device_count())};
  return *instance;
}

void check_device(cuda_device_id device, char const* caller)
{
  int const count = device_count();
  if (device.value() < 0 || device.value() >= count) [[unlikely]] {
    throw logic_error(std::string{caller} + ": device " + std::to_string(device.value()) +
                      " is not a valid device ordinal (the backend has " + std::to_string(count) +
                      (count == 1 ? " device)" : " devices)"));
  }
}

/// @pre the registry's mutex is held.
device_memory_resource* default_resource_locked(resource_registry& reg, std::size_t device)
{
  auto& slot = reg.defaults[device];
  if (slot == nullptr) { slot = new cuda_memory_resource{}; }  // NOLINT(cppcoreguidelines-owning-memory)
  return slot;
}

/**
 * @brief Makes `resource` the slot's current resource, as a new setting.
 * @pre the registry's mutex is held.
 * @return the owner this replaces: the caller drops it after unlocking (its destruction may take other
 *         locks, such as a language runtime's, that a reader may hold while it waits for this mutex).
 */
[[nodiscard]] std::shared_ptr<device_memory_resource> install_locked(device_slot& slot, device_memory_resource* resource,
                                                                     ownership owned_by,
                                                                     std::shared_ptr<device_memory_resource> owner)
{
  std::uint64_t const sequence = slot.sequence.load(std::memory_order_relaxed);
  slot.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.current.store(resource, std::memory_order_release);
  slot.owned_by.store(owned_by, std::memory_order_relaxed);
  slot.sequence.store(sequence + 2, std::memory_order_release);
  return std::exchange(slot.owner, std::move(owner));
}

/// @pre the registry's mutex is held. @return the device's resource, installing its default if none is.
device_memory_resource* current_resource_locked(resource_registry& reg, std::size_t device)
{
  device_slot& slot = reg.slots[device];
  device_memory_resource* const current = slot.current.load(std::memory_order_acquire);
  if (current != nullptr) { return current; }
  device_memory_resource* const fallback = default_resource_locked(reg, device);
  static_cast<void>(install_locked(slot, fallback, ownership::gpumem, nullptr));  // replaces no owner
  return fallback;
}

/// Sets `device`'s resource; @return the previous one.
device_memory_resource* set_resource(cuda_device_id device, device_memory_resource* resource, ownership owned_by,
                                     std::shared_ptr<device_memory_resource> owner)
{
  resource_registry& reg = registry();
  auto const index = static_cast<std::size_t>(device.value());
  device_slot& slot = reg.slots[index];
  std::shared_ptr<device_memory_resource> replaced;  // destroyed after the lock is released
  std::lock_guard lock{reg.mutex};
  device_memory_resource* const previous = current_resource_locked(reg, index);
  if (resource == nullptr) {
    replaced = install_locked(slot, default_resource_locked(reg, index), ownership::gpumem, nullptr);
  } else if (owned_by != ownership::caller || previous != resource ||
             slot.owned_by.load(std::memory_order_relaxed) != ownership::caller) {
    replaced = install_locked(slot, resource, owned_by, std::move(owner));
  }  // else: the same raw pointer again, which keeps its setting (and the plain API's pointers freeable)
  return previous;
}

}  // namespace

device_memory_resource* get_per_device_resource(cuda_device_id device)
{
  check_device(device, "gpumem::mr::get_per_device_resource");
  resource_registry& reg = registry();
  auto const index = static_cast<std::size_t>(device.value());
  if (device_memory_resource* const current = reg.slots[index].current.load(std::memory_order_acquire)) {
    return current;
  }
  std::lock_guard lock{reg.mutex};
  return current_resource_locked(reg, index);
}

device_memory_resource* set_per_device_resource(cuda_device_id device, device_memory_resource* new_mr)
{
  check_device(device, "gpumem::mr::set_per_device_resource");
  return set_resource(device, new_mr, ownership::caller, nullptr);
}

device_memory_resource* set_per_device_resource(cuda_device_id device, std::shared_ptr<device_memory_resource> new_mr)
{
  check_device(device, "gpumem::mr::set_per_device_resource");
  expects(new_mr != nullptr,
          "gpumem::mr::set_per_device_resource: the shared_ptr is empty (pass a null raw pointer to restore the default)");
  device_memory_resource* const resource = new_mr.get();
  return set_resource(device, resource, ownership::shared, std::move(new_mr));
}

bool is_per_device_resource_set(cuda_device_id device)
{
  check_device(device, "gpumem::mr::is_per_device_resource_set");
  resource_registry& reg = registry();
  std::lock_guard lock{reg.mutex};
  return reg.slots[static_cast<std::size_t>(device.value())].owned_by.load(std::memory_order_relaxed) !=
         ownership::gpumem;
}

bool set_per_device_resource_if_unset(cuda_device_id device, std::shared_ptr<device_memory_resource> new_mr)
{
  check_device(device, "gpumem::mr::set_per_device_resource_if_unset");
  expects(new_mr != nullptr, "gpumem::mr::set_per_device_resource_if_unset: the shared_ptr is empty");
  resource_registry& reg = registry();
  auto const index = static_cast<std::size_t>(device.value());
  device_slot& slot = reg.slots[index];
  std::lock_guard lock{reg.mutex};
  if (slot.owned_by.load(std::memory_order_relaxed) != ownership::gpumem) { return false; }
  device_memory_resource* const resource = new_mr.get();
  static_cast<void>(install_locked(slot, resource, ownership::shared, std::move(new_mr)));  // replaces no owner
  return true;
}

device_memory_resource* get_current_device_resource()
{
  return get_per_device_resource(cuda_device_id{detail::get_backend().current_device()});
}

device_memory_resource* set_current_device_resource(device_memory_resource* new_mr)
{
  return set_per_device_resource(cuda_device_id{detail::get_backend().current_device()}, new_mr);
}

device_memory_resource* set_current_device_resource(std::shared_ptr<device_memory_resource> new_mr)
{
  return set_per_device_resource(cuda_device_id{detail::get_backend().current_device()}, std::move(new_mr));
}

void reset_all_device_resources() noexcept
{
  resource_registry* registry_pointer = nullptr;
  try {
    registry_pointer = &registry();
  } catch (...) {
    return;  // the backend has no usable device: no resource can have been set
  }
  resource_registry& reg = *registry_pointer;
  for (std::size_t device = 0; device < reg.slots.size(); ++device) {
    std::shared_ptr<device_memory_resource> replaced;  // destroyed after the lock is released
    std::lock_guard lock{reg.mutex};
    device_slot& slot = reg.slots[device];
    if (slot.current.load(std::memory_order_relaxed) != nullptr) {
      replaced = install_locked(slot, reg.defaults[device], ownership::gpumem, nullptr);  // null: made on next use
    }
  }
}

resource_hold hold_per_device_resource(cuda_device_id device)
{
  check_device(device, "gpumem::mr::hold_per_device_resource");
  resource_registry& reg = registry();
  auto const index = static_cast<std::size_t>(device.value());
  device_slot& slot = reg.slots[index];
  // Lock-free for a raw or default resource: a consistent {resource, ownership, setting} or a retry.
  for (;;) {
    std::uint64_t const setting = slot.sequence.load(std::memory_order_acquire);
    if ((setting & 1U) != 0) {
      std::this_thread::yield();  // a writer is between its two stores
      continue;
    }
    device_memory_resource* const resource = slot.current.load(std::memory_order_relaxed);
    ownership const owned_by = slot.owned_by.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.sequence.load(std::memory_order_relaxed) != setting) { continue; }
    if (resource == nullptr || owned_by == ownership::shared) { break; }  // needs the lock
    return resource_hold{resource, nullptr, owned_by == ownership::caller ? setting : 0};
  }
  std::lock_guard lock{reg.mutex};
  device_memory_resource* const resource = current_resource_locked(reg, index);
  ownership const owned_by = slot.owned_by.load(std::memory_order_relaxed);
  std::uint64_t const setting = slot.sequence.load(std::memory_order_relaxed);
  return resource_hold{resource, slot.owner, owned_by == ownership::caller ? setting : 0};
}

bool is_current_raw_setting(cuda_device_id device, std::uint64_t raw_setting) noexcept
{
  try {
    resource_registry& reg = registry();
    if (device.value() < 0 || static_cast<std::size_t>(device.value()) >= reg.slots.size()) { return false; }
    device_slot const& slot = reg.slots[static_cast<std::size_t>(device.value())];
    return raw_setting != 0 && slot.sequence.load(std::memory_order_acquire) == raw_setting;
  } catch (...) {
    return false;  // no usable backend: nothing was ever set
  }
}

}  // namespace gpumem::mr

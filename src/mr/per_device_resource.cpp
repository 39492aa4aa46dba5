// Each device's current resource (per_device_resource.hpp).
//
// One slot per device holds its current resource: an atomic pointer, read without a lock (the plain API
// reads it on every allocation). A device whose resource was never set, or was reset, uses its default: a
// cuda_memory_resource created on first use and deliberately never destroyed (as RMM does), so that it
// outlives every other static object that may still free memory during process exit. The mutex serialises
// the writers: setting a resource, and creating a default.
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace gpumem::mr {
namespace {

/// The device count never changes during a process, so it is asked once.
int device_count()
{
  static int const count = detail::get_backend().device_count();
  return count;
}

struct resource_registry {
  explicit resource_registry(std::size_t devices) : current(devices), defaults(devices) {}

  std::mutex mutex;  // serialises writers
  std::vector<std::atomic<device_memory_resource*>> current;  // per device; null: the default, not made yet
  std::vector<cuda_memory_resource*> defaults;                // guarded by mutex; never freed
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

/// @pre the registry's mutex is held. @return the device's resource, installing its default if none is.
device_memory_resource* current_resource_locked(resource_registry& reg, std::size_t device)
{
  device_memory_resource* current = reg.current[device].load(std::memory_order_acquire);
  if (current == nullptr) {
    current = default_resource_locked(reg, device);
    reg.current[device].store(current, std::memory_order_release);
  }
  return current;
}

}  // namespace

device_memory_resource* get_per_device_resource(cuda_device_id device)
{
  check_device(device, "gpumem::mr::get_per_device_resource");
  resource_registry& reg = registry();
  auto const slot = static_cast<std::size_t>(device.value());
  if (device_memory_resource* const current = reg.current[slot].load(std::memory_order_acquire)) { return current; }
  std::lock_guard lock{reg.mutex};
  return current_resource_locked(reg, slot);
}

device_memory_resource* set_per_device_resource(cuda_device_id device, device_memory_resource* new_mr)
{
  check_device(device, "gpumem::mr::set_per_device_resource");
  resource_registry& reg = registry();
  auto const slot = static_cast<std::size_t>(device.value());
  std::lock_guard lock{reg.mutex};
  device_memory_resource* const previous = current_resource_locked(reg, slot);
  reg.current[slot].store(new_mr != nullptr ? new_mr : default_resource_locked(reg, slot), std::memory_order_release);
  return previous;
}

device_memory_resource* get_current_device_resource()
{
  return get_per_device_resource(cuda_device_id{detail::get_backend().current_device()});
}

device_memory_resource* set_current_device_resource(device_memory_resource* new_mr)
{
  return set_per_device_resource(cuda_device_id{detail::get_backend().current_device()}, new_mr);
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
  std::lock_guard lock{reg.mutex};
  for (std::size_t device = 0; device < reg.current.size(); ++device) {
    reg.current[device].store(reg.defaults[device], std::memory_order_release);  // null: made on next use
  }
}

}  // namespace gpumem::mr

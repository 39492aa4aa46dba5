// Each device's current resource (per_device_resource.hpp).
//
// One mutex guards a map device -> resource set by the user. A device with no entry uses its default
// resource: a cuda_memory_resource created on first use and deliberately never destroyed (as RMM does), so
// that it outlives every other static object that may still free memory during process exit.
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <mutex>
#include <string>
#include <unordered_map>

namespace gpumem::mr {
namespace {

struct resource_registry {
  std::mutex mutex;
  std::unordered_map<int, device_memory_resource*> current;        // guarded by mutex; only set entries
  std::unordered_map<int, cuda_memory_resource*> defaults;         // guarded by mutex; never freed
};

/// The registry, leaked on purpose: see the file comment.
resource_registry& registry()
{
  static auto* const instance = new resource_registry{};  // NOLINT(cppcoreguidelines-owning-memory)
  return *instance;
}

/// The device count never changes during a process, so it is asked once.
int device_count()
{
  static int const count = detail::get_backend().device_count();
  return count;
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
device_memory_resource* default_resource_locked(resource_registry& reg, int device)
{
  auto& slot = reg.defaults[device];
  if (slot == nullptr) { slot = new cuda_memory_resource{}; }  // NOLINT(cppcoreguidelines-owning-memory)
  return slot;
}

/// @pre the registry's mutex is held.
device_memory_resource* current_resource_locked(resource_registry& reg, int device)
{
  auto const it = reg.current.find(device);
  return it != reg.current.end() ? it->second : default_resource_locked(reg, device);
}

}  // namespace

device_memory_resource* get_per_device_resource(cuda_device_id device)
{
  check_device(device, "gpumem::mr::get_per_device_resource");
  resource_registry& reg = registry();
  std::lock_guard lock{reg.mutex};
  return current_resource_locked(reg, device.value());
}

device_memory_resource* set_per_device_resource(cuda_device_id device, device_memory_resource* new_mr)
{
  check_device(device, "gpumem::mr::set_per_device_resource");
  resource_registry& reg = registry();
  std::lock_guard lock{reg.mutex};
  device_memory_resource* const previous = current_resource_locked(reg, device.value());
  if (new_mr == nullptr) {
    reg.current.erase(device.value());
  } else {
    reg.current[device.value()] = new_mr;
  }
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
  resource_registry& reg = registry();
  std::lock_guard lock{reg.mutex};
  reg.current.clear();
}

}  // namespace gpumem::mr

// Device queries and the current-device helpers (device.hpp, cuda_device_id.hpp).
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>

#include <string>

namespace gpumem {

void check_device_id(cuda_device_id device)
{
  int const count = detail::get_backend().device_count();
  if (device.value() < 0 || device.value() >= count) {
    throw logic_error("device " + std::to_string(device.value()) + " does not exist: the " +
                      std::string{to_string(detail::get_backend().kind())} + " backend has " +
                      std::to_string(count) + (count == 1 ? " device" : " devices"));
  }
}

cuda_device_id get_current_cuda_device() { return cuda_device_id{detail::get_backend().current_device()}; }

void set_current_cuda_device(cuda_device_id device)
{
  check_device_id(device);
  detail::get_backend().set_current_device(device.value());
}

int get_num_cuda_devices() { return detail::get_backend().device_count(); }

std::vector<std::pair<std::string, int>> get_device_attributes(cuda_device_id device)
{
  return detail::get_backend().device_attributes(device.value());
}

cuda_device_id get_device_by_pci_bus_id(std::string const& pci_bus_id)
{
  return cuda_device_id{detail::get_backend().device_by_pci_bus_id(pci_bus_id)};
}

pointer_attributes get_pointer_attributes(void const* ptr) { return detail::get_backend().pointer_get_attributes(ptr); }

cuda_set_device_raii::cuda_set_device_raii(cuda_device_id device)
  : previous_{get_current_cuda_device()}, needs_reset_{previous_ != device}
{
  if (needs_reset_) { set_current_cuda_device(device); }
}

cuda_set_device_raii::~cuda_set_device_raii() noexcept
{
  if (needs_reset_) {
    try {
      detail::get_backend().set_current_device(previous_.value());
    } catch (...) {  // restoring a device that was valid cannot fail in practice; never throw here
    }
  }
}

device_properties get_device_properties(cuda_device_id device)
{
  check_device_id(device);
  return detail::get_backend().properties(device.value());
}

memory_info available_device_memory(cuda_device_id device)
{
  check_device_id(device);
  return detail::get_backend().mem_info(device.value());
}

memory_info available_device_memory() { return available_device_memory(get_current_cuda_device()); }

int runtime_version() { return detail::get_backend().runtime_version(); }

int driver_version() { return detail::get_backend().driver_version(); }

void synchronize_device() { detail::get_backend().device_synchronize(); }

}  // namespace gpumem

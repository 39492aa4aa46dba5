// device_identity (device_identity.hpp): the backend's answers, remembered.
#include "ipc/device_identity.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/detail/thread_annotations.hpp>

#include <map>

namespace gpumem::detail::ipc {
namespace {

struct known_devices {
  detail::mutex mutex;
  std::map<int, std::string> bus_of GPUMEM_GUARDED_BY(mutex);
  std::map<std::string, int> ordinal_of GPUMEM_GUARDED_BY(mutex);
};

known_devices& known()
{
  static known_devices devices;
  return devices;
}

}  // namespace

std::string pci_bus_id_of(int device)
{
  known_devices& k = known();
  {
    detail::lock_guard lock{k.mutex};
    if (auto const found = k.bus_of.find(device); found != k.bus_of.end()) { return found->second; }
  }
  std::string bus = get_backend().properties(device).pci_bus_id;
  detail::lock_guard lock{k.mutex};
  return k.bus_of.emplace(device, std::move(bus)).first->second;
}

int device_at(std::string const& pci_bus_id)
{
  known_devices& k = known();
  {
    detail::lock_guard lock{k.mutex};
    if (auto const found = k.ordinal_of.find(pci_bus_id); found != k.ordinal_of.end()) { return found->second; }
  }
  int const device = get_backend().device_by_pci_bus_id(pci_bus_id);
  detail::lock_guard lock{k.mutex};
  return k.ordinal_of.emplace(pci_bus_id, device).first->second;
}

}  // namespace gpumem::detail::ipc

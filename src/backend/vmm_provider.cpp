// make_device_vmm_provider: the provider of the process's backend (virtual_memory_provider.hpp).
#include "backend/vmm_providers.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>
#include <gpumem/error.hpp>

#include <string>

namespace gpumem::mr {

int virtual_memory_provider::export_handle(physical_handle /*handle*/)
{
  throw logic_error(describe() + " cannot share its physical memory with another process");
}

physical_handle virtual_memory_provider::import_handle(int /*fd*/, std::size_t bytes)
{
  throw logic_error(describe() + " cannot import physical memory of another process (" + format_bytes(bytes) + ")");
}

std::unique_ptr<virtual_memory_provider> make_device_vmm_provider(int device, std::vector<int> const& peers)
{
  if (detail::get_backend().kind() == backend_kind::cuda) { return detail::make_cuda_vmm_provider(device, peers); }
  return detail::make_host_vmm_provider(device, peers);
}

}  // namespace gpumem::mr

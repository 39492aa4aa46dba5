// The backends' virtual memory providers (include/gpumem/backend/virtual_memory_provider.hpp), one per backend.
#pragma once

#include <gpumem/backend/virtual_memory_provider.hpp>

#include <memory>
#include <vector>

namespace gpumem::detail {

/// The driver's cuMem* calls for `device`, access for `peers` too. @throws as make_device_vmm_provider.
[[nodiscard]] std::unique_ptr<mr::virtual_memory_provider> make_cuda_vmm_provider(int device, std::vector<int> const& peers);
/// The memfd emulation for host device `device`. @throws as make_device_vmm_provider.
[[nodiscard]] std::unique_ptr<mr::virtual_memory_provider> make_host_vmm_provider(int device, std::vector<int> const& peers);

}  // namespace gpumem::detail

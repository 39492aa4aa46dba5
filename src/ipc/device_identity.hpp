// How a handle names a device across processes, whose ordinals differ (CUDA_VISIBLE_DEVICES): its PCI bus
// id on the cuda backend, its ordinal on the host backend (whose devices have no bus). Both lookups are cached
// per process (a device's bus id never changes), so that an export or import costs no device query after the
// first.
#pragma once

#include <string>

namespace gpumem::detail::ipc {

/** @return the PCI bus id of `device` (empty under the host backend). @throws cuda_error from the backend. */
[[nodiscard]] std::string pci_bus_id_of(int device);

/** @return this process's ordinal of the device at `pci_bus_id`. @throws cuda_error when none is visible. */
[[nodiscard]] int device_at(std::string const& pci_bus_id);

}  // namespace gpumem::detail::ipc

/**
 * @file device.hpp
 * Device queries: properties, free and total memory, runtime and driver versions, synchronisation.
 * Each forwards to the process's backend (backend.hpp); under the host backend they describe the
 * emulated devices.
 */
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/export.hpp>

#include <string>
#include <utility>
#include <vector>

namespace gpumem {

/**
 * @brief What `device` is: name, compute capability, total memory, multiprocessors, pool support.
 * @throws gpumem::logic_error if `device` is not a valid device ordinal.
 */
[[nodiscard]] GPUMEM_EXPORT device_properties get_device_properties(cuda_device_id device);

/**
 * @brief Free and total bytes of `device` (cudaMemGetInfo).
 * @throws gpumem::logic_error if `device` is not a valid device ordinal.
 */
[[nodiscard]] GPUMEM_EXPORT memory_info available_device_memory(cuda_device_id device);

/** @brief available_device_memory of the calling thread's current device. */
[[nodiscard]] GPUMEM_EXPORT memory_info available_device_memory();

/** @brief The CUDA runtime version gpumem runs with (e.g. 13000 for 13.0). */
[[nodiscard]] GPUMEM_EXPORT int runtime_version();

/** @brief The installed driver's CUDA version (e.g. 13000), or 0 under the host backend. */
[[nodiscard]] GPUMEM_EXPORT int driver_version();

/** @brief Blocks until all work on the calling thread's current device has completed. @throws cuda_error */
GPUMEM_EXPORT void synchronize_device();

/** @brief Throws logic_error naming `device` and the device count unless 0 <= device < count. */
GPUMEM_EXPORT void check_device_id(cuda_device_id device);

/**
 * @brief Every cudaDeviceAttr of `device` the runtime answers, named as the enumerator without its
 * "cudaDevAttr" prefix ("MaxThreadsPerBlock"), in the enumeration's order; under the host backend the same
 * names with the emulated device's values (0 where it has no such feature).
 * @throws gpumem::cuda_error (cudaErrorInvalidDevice) for a device that does not exist.
 */
[[nodiscard]] GPUMEM_EXPORT std::vector<std::pair<std::string, int>> get_device_attributes(cuda_device_id device);

/**
 * @brief The device at PCI bus id `pci_bus_id` ("0000:3b:00.0"; cudaDeviceGetByPCIBusId).
 * @throws gpumem::cuda_error: cudaErrorInvalidValue for a malformed id, cudaErrorInvalidDevice when no device
 * is there (the host backend's devices have no bus id).
 */
[[nodiscard]] GPUMEM_EXPORT cuda_device_id get_device_by_pci_bus_id(std::string const& pci_bus_id);

/**
 * @brief What `ptr` points into (cudaPointerGetAttributes): memory type, device and addresses; type 0 and
 * device -2 for memory CUDA does not know (plain host memory).
 * @throws gpumem::cuda_error (cudaErrorInvalidValue for nullptr)
 */
[[nodiscard]] GPUMEM_EXPORT pointer_attributes get_pointer_attributes(void const* ptr);

}  // namespace gpumem

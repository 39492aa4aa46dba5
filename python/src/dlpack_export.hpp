// Exporting memory as a DLPack capsule (the unversioned "dltensor" protocol, dlpack.hpp), shared by every
// object with __dlpack__: DeviceBuffer and the device view of a UnifiedBuffer.
#pragma once

#include "dlpack.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace gpumem::python {

namespace py = pybind11;

/**
 * @brief (device type, device id) that __dlpack_device__ reports for device memory of `device`: kDLCUDA
 * and the device on the cuda backend; kDLCPU and 0 on the host backend, whose "device" memory is host
 * memory (so numpy.from_dlpack accepts it there).
 */
[[nodiscard]] std::pair<std::int32_t, std::int32_t> dlpack_device_of(int device);

/** @brief The DLPack element type of a NumPy dtype. @throws py::type_error for dtypes DLPack cannot carry. */
[[nodiscard]] dlpack::DLDataType dlpack_dtype_of(py::dtype const& dtype);

/**
 * @brief A "dltensor" capsule of a compact row-major tensor over `data`, which holds a strong reference to
 * `owner` until the consumer (or, if none takes it, the capsule) releases the tensor. Any thread may release
 * it: the reference is dropped with the GIL taken.
 */
[[nodiscard]] py::capsule make_dlpack_capsule(py::object const& owner, void* data, std::vector<std::int64_t> shape,
                                              dlpack::DLDataType dtype, std::pair<std::int32_t, std::int32_t> device);

/**
 * @brief Whether __dlpack__(stream=...) leaves the ordering to the consumer: stream -1 means "no
 * synchronisation". @throws py::value_error when a CPU consumer (device type kDLCPU) passes a stream.
 */
[[nodiscard]] bool dlpack_consumer_orders(py::object const& stream, std::int32_t device_type, char const* caller);

}  // namespace gpumem::python

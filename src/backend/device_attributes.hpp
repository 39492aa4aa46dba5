// The names of the device attributes both backends report (backend::device_attributes): one table, so that the
// host backend answers with the same names as the cuda backend.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string_view>

namespace gpumem::detail {

/** @brief A cudaDeviceAttr and its name without the "cudaDevAttr" prefix. */
struct device_attribute {
  std::string_view name;
  cudaDeviceAttr attribute;
};

/** @brief Every cudaDeviceAttr of the toolkit gpumem is built with, except the reserved ones, in enumeration order. */
[[nodiscard]] std::span<device_attribute const> device_attribute_table() noexcept;

}  // namespace gpumem::detail

// The few DLPack declarations that __dlpack__ needs (dlpack_export.hpp), written from the public DLPack ABI
// (v0.8, dmlc/dlpack include/dlpack/dlpack.h): the unversioned DLManagedTensor exchanged in a PyCapsule
// named "dltensor" (renamed "used_dltensor" by the consumer that takes ownership). Only the layout matters:
// these structs must match the C ABI field for field, so they are plain aggregates with fixed-width types.
#pragma once

#include <cstdint>

namespace gpumem::python::dlpack {

/** @brief DLDeviceType values used here. kDLCPU: host memory; kDLCUDA: CUDA device memory. */
enum device_type : std::int32_t { kDLCPU = 1, kDLCUDA = 2 };

/** @brief DLDataTypeCode values used here. */
enum type_code : std::uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLComplex = 5, kDLBool = 6 };

/** @brief DLDevice: where the memory lives. */
struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};

/** @brief DLDataType: one element's type (code, bits per lane, lanes). */
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

/** @brief DLTensor: a view of memory; `strides` null means compact row-major. */
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};

/** @brief DLManagedTensor: a DLTensor plus its owner; the consumer calls deleter(self) when done. */
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

/** @brief The capsule names of the unversioned protocol. */
inline constexpr char const* capsule_name = "dltensor";
inline constexpr char const* used_capsule_name = "used_dltensor";

}  // namespace gpumem::python::dlpack

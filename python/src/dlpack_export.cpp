// Exporting memory as a DLPack capsule: see dlpack_export.hpp.
#include "dlpack_export.hpp"

#include <gpumem/device.hpp>

#include <memory>
#include <string>

namespace gpumem::python {
namespace {

/** @brief The manager_ctx of an exported DLManagedTensor: the owner and the shape array. */
struct dlpack_context {
  PyObject* owner{};  ///< a strong reference to the exporting object
  std::vector<std::int64_t> shape;
  dlpack::DLManagedTensor tensor{};
};

/** @brief The DLManagedTensor deleter: drops the owner (taking the GIL: any thread may call it). */
void delete_dlpack_tensor(dlpack::DLManagedTensor* tensor)
{
  auto* const context = static_cast<dlpack_context*>(tensor->manager_ctx);
  // Py_IsInitialized() is already false while the interpreter finalises (and clears the modules that may
  // hold the capsule's consumer): the thread that finalises still has its thread state, and must drop the
  // owner so that its memory and resource are released (a logging adaptor writes its file then). After
  // finalisation neither holds, and the reference is leaked rather than touched.
  if (Py_IsInitialized() != 0 || PyGILState_GetThisThreadState() != nullptr) {
    PyGILState_STATE const state = PyGILState_Ensure();
    Py_DECREF(context->owner);
    PyGILState_Release(state);
  }
  delete context;  // NOLINT(cppcoreguidelines-owning-memory)
}

/** @brief The capsule's destructor: frees the tensor if no consumer took it (it would have renamed the capsule). */
void delete_dlpack_capsule(PyObject* capsule)
{
  if (PyCapsule_IsValid(capsule, dlpack::capsule_name) == 0) { return; }  // consumed: the consumer owns it
  auto* const tensor = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule, dlpack::capsule_name));
  if (tensor != nullptr && tensor->deleter != nullptr) { tensor->deleter(tensor); }
}

}  // namespace

std::pair<std::int32_t, std::int32_t> dlpack_device_of(int device)
{
  if (current_backend_kind() == backend_kind::host) { return {dlpack::kDLCPU, 0}; }
  return {dlpack::kDLCUDA, device};
}

dlpack::DLDataType dlpack_dtype_of(py::dtype const& dtype)
{
  auto const kind = dtype.kind();
  auto const bits = static_cast<std::uint8_t>(dtype.itemsize() * 8);
  switch (kind) {
    case 'i': return {dlpack::kDLInt, bits, 1};
    case 'u': return {dlpack::kDLUInt, bits, 1};
    case 'f': return {dlpack::kDLFloat, bits, 1};
    case 'c': return {dlpack::kDLComplex, bits, 1};
    case 'b': return {dlpack::kDLBool, 8, 1};
    default:
      throw py::type_error("DLPack cannot carry the dtype " + py::str(static_cast<py::handle const&>(dtype)).cast<std::string>() +
                           " (only bool, integer, float and complex dtypes)");
  }
}

py::capsule make_dlpack_capsule(py::object const& owner, void* data, std::vector<std::int64_t> shape,
                                dlpack::DLDataType dtype, std::pair<std::int32_t, std::int32_t> device)
{
  auto context = std::make_unique<dlpack_context>();
  context->shape = std::move(shape);
  context->tensor.dl_tensor.data = data;
  context->tensor.dl_tensor.device = {device.first, device.second};
  context->tensor.dl_tensor.ndim = static_cast<std::int32_t>(context->shape.size());
  context->tensor.dl_tensor.dtype = dtype;
  context->tensor.dl_tensor.shape = context->shape.data();
  context->tensor.dl_tensor.strides = nullptr;  // compact row-major
  context->tensor.dl_tensor.byte_offset = 0;
  context->tensor.manager_ctx = context.get();
  context->tensor.deleter = delete_dlpack_tensor;
  PyObject* const capsule = PyCapsule_New(&context->tensor, dlpack::capsule_name, delete_dlpack_capsule);
  if (capsule == nullptr) { throw py::error_already_set(); }
  context->owner = owner.inc_ref().ptr();
  (void)context.release();  // owned by the capsule (or its consumer) now
  return py::reinterpret_steal<py::capsule>(capsule);
}

bool dlpack_consumer_orders(py::object const& stream, std::int32_t device_type, char const* caller)
{
  if (device_type == dlpack::kDLCPU && !stream.is_none()) {
    throw py::value_error(std::string{caller} + ": stream must be None for a CPU consumer");
  }
  if (stream.is_none()) { return false; }
  if (!py::isinstance<py::int_>(stream)) {
    throw py::type_error(std::string{caller} + ": stream must be an int or None, not " +
                         std::string{py::str(stream.get_type().attr("__name__"))});
  }
  return stream.equal(py::int_(-1));  // any int compares, however large
}

}  // namespace gpumem::python

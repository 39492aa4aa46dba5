// The C API (gpumem.h): each function runs its C++ counterpart from plain.hpp and turns every exception
// into a gpumem_status, keeping the message for gpumem_last_error() in a thread-local string.
#include <gpumem.h>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/plain.hpp>

#include <cuda_runtime_api.h>

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace {

thread_local std::string last_error_message;

gpumem_status fail(gpumem_status status, char const* what) noexcept
{
  try {
    last_error_message = what;
  } catch (...) {  // no memory even for the message: keep the status
    last_error_message.clear();
  }
  return status;
}

/// Runs `body`; maps whatever it throws to a status. The order matters: derived types first.
template <class Body>
gpumem_status guarded(Body&& body) noexcept
{
  try {
    body();
    return GPUMEM_SUCCESS;
  } catch (gpumem::out_of_memory const& e) {
    return fail(GPUMEM_ERROR_OUT_OF_MEMORY, e.what());
  } catch (gpumem::bad_alloc const& e) {
    return fail(GPUMEM_ERROR_BAD_ALLOC, e.what());
  } catch (std::bad_alloc const& e) {
    return fail(GPUMEM_ERROR_BAD_ALLOC, e.what());
  } catch (gpumem::logic_error const& e) {
    return fail(GPUMEM_ERROR_INVALID_VALUE, e.what());
  } catch (gpumem::cuda_error const& e) {
    return fail(GPUMEM_ERROR_CUDA, e.what());
  } catch (std::logic_error const& e) {
    return fail(GPUMEM_ERROR_INVALID_VALUE, e.what());
  } catch (std::exception const& e) {
    return fail(GPUMEM_ERROR_UNKNOWN, e.what());
  } catch (...) {
    return fail(GPUMEM_ERROR_UNKNOWN, "unknown exception (not derived from std::exception)");
  }
}

gpumem::cuda_stream_view to_stream(void* stream) noexcept
{
  return gpumem::cuda_stream_view{static_cast<cudaStream_t>(stream)};
}

gpumem_status null_out(char const* function) noexcept
{
  try {
    return fail(GPUMEM_ERROR_INVALID_VALUE, (std::string{function} + ": the output pointer is NULL").c_str());
  } catch (...) {
    return fail(GPUMEM_ERROR_INVALID_VALUE, "the output pointer is NULL");
  }
}

gpumem_status allocate(char const* function, size_t size, void* stream, void** out, bool zero) noexcept
{
  if (out == nullptr) { return null_out(function); }
  *out = nullptr;
  return guarded([&] {
    gpumem::cuda_stream_view const on = to_stream(stream);
    *out = zero ? gpumem::zeros(size, on) : gpumem::alloc(size, on);
  });
}

}  // namespace

extern "C" {

gpumem_status gpumem_alloc(size_t size, void** out) { return allocate("gpumem_alloc", size, nullptr, out, false); }

gpumem_status gpumem_zeros(size_t size, void** out) { return allocate("gpumem_zeros", size, nullptr, out, true); }

gpumem_status gpumem_alloc_async(size_t size, void* stream, void** out)
{
  return allocate("gpumem_alloc_async", size, stream, out, false);
}

gpumem_status gpumem_free(void* ptr)
{
  return guarded([&] { gpumem::free(ptr); });
}

gpumem_status gpumem_free_async(void* ptr, void* stream)
{
  return guarded([&] { gpumem::free(ptr, to_stream(stream)); });
}

gpumem_status gpumem_allocation_size(const void* ptr, size_t* out)
{
  if (out == nullptr) { return null_out("gpumem_allocation_size"); }
  *out = 0;
  return guarded([&] { *out = gpumem::allocation_size(ptr); });
}

const char* gpumem_last_error(void) { return last_error_message.c_str(); }

const char* gpumem_status_string(gpumem_status status)
{
  switch (status) {
    case GPUMEM_SUCCESS: return "success";
    case GPUMEM_ERROR_OUT_OF_MEMORY: return "out of memory";
    case GPUMEM_ERROR_BAD_ALLOC: return "bad allocation request";
    case GPUMEM_ERROR_INVALID_VALUE: return "invalid value";
    case GPUMEM_ERROR_CUDA: return "CUDA error";
    case GPUMEM_ERROR_UNKNOWN: return "unknown error";
  }
  return "unrecognised gpumem_status value";
}

}  // extern "C"

/**
 * @file error.hpp
 * gpumem's exception types, the contract check `expects`, and the one CUDA-check macro.
 *
 * Which exception means what (DESIGN.md, "Errors"):
 * - gpumem::logic_error:   the caller misused the API (bad alignment, unknown pointer, double free, ...).
 * - gpumem::out_of_range:  an element index outside a container (a std::out_of_range, as RMM's).
 * - gpumem::cuda_error:    a backend call failed; the message names the call, the error code and its text.
 * - gpumem::bad_alloc:     an allocation cannot be made for a reason other than exhausted memory
 *                          (for example a size that overflows when rounded up).
 * - gpumem::out_of_memory: the memory is truly not there, after the resource's own retry; the message names
 *                          the requested size, the resource, the device, and the device's free and total memory.
 * Deallocation and destructors never throw.
 */
#pragma once

#include <gpumem/export.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpumem {

/** @brief The caller broke a precondition of the API. Derives from std::logic_error. */
class GPUMEM_EXPORT logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/**
 * @brief An element index at or past a container's size (device_uvector's element access). Derives from
 * std::out_of_range (so from std::logic_error, but not from gpumem::logic_error), the type RMM throws and
 * standard containers' at() throw.
 */
class GPUMEM_EXPORT out_of_range : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

/**
 * @brief A CUDA (or emulated CUDA) call failed.
 * The message names the call, the error code's name and the runtime's text for it.
 */
class GPUMEM_EXPORT cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t code, std::string const& message);

  /** @return the CUDA error code that the failing call returned. */
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

/** @brief An allocation could not be made. Derives from std::bad_alloc and carries a message. */
class GPUMEM_EXPORT bad_alloc : public std::bad_alloc {
 public:
  explicit bad_alloc(std::string message);
  [[nodiscard]] char const* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

/**
 * @brief The requested memory is not available on the device, even after the resource's own retry.
 * The message names the requested size, the resource, the device and its free and total memory.
 */
class GPUMEM_EXPORT out_of_memory : public bad_alloc {
 public:
  using bad_alloc::bad_alloc;
};

/**
 * @brief Checks a precondition; throws `Exception` (default gpumem::logic_error) when it does not hold.
 * The message is prefixed with the calling function's name so that the error says where it came from.
 * @throws Exception if `condition` is false.
 */
template <class Exception = logic_error>
inline void expects(bool condition, std::string_view message,
                    std::source_location where = std::source_location::current())
{
  if (!condition) [[unlikely]] {
    throw Exception(std::string{where.function_name()} + ": " + std::string{message});
  }
}

/** @brief A byte count as people read it, e.g. "1.50 GiB (1610612736 bytes)". */
[[nodiscard]] GPUMEM_EXPORT std::string format_bytes(std::size_t bytes);

/** @brief A pointer as hexadecimal text, e.g. "0x7f12a0000000". */
[[nodiscard]] GPUMEM_EXPORT std::string format_pointer(void const* ptr);

/**
 * @brief Throws gpumem::out_of_memory for a failed request, with the message DESIGN.md asks for:
 * requested size, resource, device, and the device's free and total memory (queried from the backend).
 * @param resource the resource's name, e.g. "cuda_memory_resource".
 * @param details  optional resource state to append (bytes cached, largest free block, ...).
 */
[[noreturn]] GPUMEM_EXPORT void throw_out_of_memory(std::string_view resource, std::size_t bytes, int device,
                                                    std::string_view details = {});

namespace detail {
/** @brief Throws cuda_error for `code` as returned by `call` (the text of the call). */
[[noreturn]] GPUMEM_EXPORT void throw_cuda_error(cudaError_t code, char const* call, char const* file, int line);
}  // namespace detail

}  // namespace gpumem

/**
 * @brief The one CUDA-check macro: evaluates a cudaError_t-returning call and throws gpumem::cuda_error
 * naming the call, the code and its text when it is not cudaSuccess. A macro (not a function) so that the
 * message can quote the call's source text.
 */
#define GPUMEM_CUDA_TRY(call)                                                            \
  do {                                                                                   \
    cudaError_t const gpumem_cuda_try_status_ = (call);                                  \
    if (gpumem_cuda_try_status_ != cudaSuccess) {                                        \
      ::gpumem::detail::throw_cuda_error(gpumem_cuda_try_status_, #call, __FILE__, __LINE__); \
    }                                                                                    \
  } while (0)

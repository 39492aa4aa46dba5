/**
 * @file callback_memory_resource.hpp
 * A device resource whose allocate and deallocate are functions the application supplies (RMM's
 * callback_memory_resource): to route gpumem's requests to another allocator, or to watch them while
 * debugging.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <functional>

namespace gpumem::mr {

/**
 * @brief allocate(bytes, stream, arg): returns `bytes` bytes, 256-byte aligned, usable at once by work on
 * `stream`; throws (gpumem::out_of_memory, or anything) when it cannot. `arg` is the value given at
 * construction.
 */
using allocate_callback_t = std::function<void*(std::size_t, cuda_stream_view, void*)>;

/** @brief deallocate(ptr, bytes, stream, arg): gives back memory that allocate returned. Must not throw. */
using deallocate_callback_t = std::function<void(void*, std::size_t, cuda_stream_view, void*)>;

/**
 * @brief Calls the two functions given at construction for every allocation and deallocation.
 *
 * The resource checks what the callback returns against device_memory_resource's contract, which RMM
 * leaves to the callback: a null result is gpumem::bad_alloc, a result not aligned to 256 bytes is given
 * back through the deallocate callback and reported as gpumem::logic_error. An exception the allocate
 * callback throws passes through unchanged. A deallocate callback that throws ends the program
 * (deallocate is noexcept).
 *
 * Cost: one std::function call per allocate or deallocate, plus what the callbacks do.
 * Thread-safety: as the callbacks': the resource has no state of its own besides them.
 * Stream-ordering: as the callbacks implement it; the resource passes each call's stream on unchanged.
 * Equality: equal only to itself (two resources over the same functions may hold different memory).
 */
class GPUMEM_EXPORT callback_memory_resource final : public device_memory_resource {
 public:
  /**
   * @param allocate_callback called by allocate (never for 0 bytes: allocate(0) returns nullptr first).
   * @param deallocate_callback called by deallocate (never for nullptr).
   * @param allocate_callback_arg passed to every allocate_callback call as its last argument.
   * @param deallocate_callback_arg passed to every deallocate_callback call as its last argument.
   * @throws gpumem::logic_error if either callback is empty.
   */
  callback_memory_resource(allocate_callback_t allocate_callback, deallocate_callback_t deallocate_callback,
                           void* allocate_callback_arg = nullptr, void* deallocate_callback_arg = nullptr);
  ~callback_memory_resource() override = default;
  callback_memory_resource(callback_memory_resource const&) = delete;
  callback_memory_resource& operator=(callback_memory_resource const&) = delete;
  callback_memory_resource(callback_memory_resource&&) = delete;
  callback_memory_resource& operator=(callback_memory_resource&&) = delete;

 private:
  /**
   * @throws what the allocate callback throws; gpumem::bad_alloc when it returns nullptr;
   *         gpumem::logic_error (after deallocating it) when it returns memory not aligned to 256 bytes.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;

  allocate_callback_t allocate_callback_;
  deallocate_callback_t deallocate_callback_;
  void* allocate_callback_arg_;
  void* deallocate_callback_arg_;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<callback_memory_resource, cuda::mr::device_accessible>);
#endif

}  // namespace gpumem::mr

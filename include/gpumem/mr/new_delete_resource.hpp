/**
 * @file new_delete_resource.hpp
 * A host memory resource over the global aligned ::operator new / ::operator delete.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/host_memory_resource.hpp>

#include <cstddef>

#if __has_include(<cuda/memory_resource>) && defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#include <cuda/memory_resource>
#define GPUMEM_HAS_CUDA_MR 1
#endif

namespace gpumem::mr {

/**
 * @brief A host_memory_resource (std::pmr::memory_resource) that allocates with the global
 * `::operator new(bytes, std::align_val_t{alignment})` and frees with the matching sized, aligned delete.
 *
 * Unlike std::pmr::new_delete_resource(), it checks the alignment (a power of two, else
 * gpumem::logic_error) and reports failure as gpumem::bad_alloc with a message naming the request.
 * allocate(0) returns a valid, unique pointer (one byte is allocated), as pmr requires.
 *
 * Thread-safety: all members may be called concurrently (the resource has no state; ::operator new is
 * thread-safe).
 * Stream-ordering: none: host memory, usable when allocate returns, reusable when deallocate returns.
 *
 * Any two new_delete_resource objects compare equal. Satisfies CCCL's
 * cuda::mr::resource_with<host_accessible> where CCCL provides it.
 */
class GPUMEM_EXPORT new_delete_resource final : public host_memory_resource {
 public:
  new_delete_resource() = default;
  ~new_delete_resource() override = default;
  new_delete_resource(new_delete_resource const&) = default;
  new_delete_resource& operator=(new_delete_resource const&) = default;

#ifdef GPUMEM_HAS_CUDA_MR
  /** @brief CCCL property: the memory is host memory. */
  friend void get_property(new_delete_resource const&, cuda::mr::host_accessible) noexcept {}
#endif

 private:
  /**
   * @pre `alignment` is a power of two.
   * @return memory of at least max(bytes, 1) bytes aligned to `alignment`.
   * @throws gpumem::logic_error when `alignment` is not a power of two (the message names it).
   * @throws gpumem::bad_alloc when ::operator new fails (the message names the size and alignment).
   */
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  /** @pre `ptr` came from allocate(bytes, alignment) of an equal resource. Never throws. */
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment) noexcept override;
  /** @return true when `other` is a new_delete_resource. */
  [[nodiscard]] bool do_is_equal(host_memory_resource const& other) const noexcept override;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::resource_with<new_delete_resource, cuda::mr::host_accessible>);
#endif

}  // namespace gpumem::mr

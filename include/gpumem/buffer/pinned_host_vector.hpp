/**
 * @file pinned_host_vector.hpp
 * `pinned_host_vector<T>`: a std::vector whose elements live in pinned host memory from a
 * pinned_memory_pool, so copies between it and the device run asynchronously at the link's full speed.
 */
#pragma once

#include <gpumem/mr/pinned_memory_pool.hpp>

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpumem {

/**
 * @brief A standard allocator over a pinned_memory_pool (by default the process's default pinned pool).
 *
 * Value-initialisation without arguments (what resize(n) and vector(n) do) leaves trivially copyable
 * elements uninitialised, as new T would: pinning a large vector should not also write it. Pass a value
 * (`resize(n, T{})`) to initialise.
 *
 * Stream-ordering: deallocation returns the memory to the pool at once, so no asynchronous copy may still
 * use it when the container frees it (synchronise the stream first). Allocators compare equal when they
 * use the same pool. Thread-safety: as the pool's (thread-safe).
 */
template <class T>
class pinned_allocator {
 public:
  using value_type = T;

  pinned_allocator() noexcept : pool_{&mr::get_default_pinned_pool()} {}
  explicit pinned_allocator(mr::pinned_memory_pool& pool) noexcept : pool_{&pool} {}
  template <class U>
  pinned_allocator(pinned_allocator<U> const& other) noexcept : pool_{other.pool()}  // NOLINT: rebinding
  {
  }

  /** @throws gpumem::out_of_memory when the pool cannot serve the request; std::bad_array_new_length on overflow. */
  [[nodiscard]] T* allocate(std::size_t n)
  {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) { throw std::bad_array_new_length{}; }
    return static_cast<T*>(pool_->allocate(n * sizeof(T), alignof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept
  {
    try {
      pool_->deallocate(p, n * sizeof(T), alignof(T));
    } catch (...) {  // NOLINT(bugprone-empty-catch): a container never frees what it did not allocate
    }
  }

  /** @brief Default-initialises trivially copyable elements (no write); constructs everything else. */
  template <class U, class... Args>
  void construct(U* p, Args&&... args)
  {
    if constexpr (sizeof...(Args) == 0 && std::is_trivially_default_constructible_v<U>) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }

  [[nodiscard]] mr::pinned_memory_pool* pool() const noexcept { return pool_; }

  template <class U>
  friend bool operator==(pinned_allocator const& a, pinned_allocator<U> const& b) noexcept
  {
    return a.pool() == b.pool();
  }

 private:
  mr::pinned_memory_pool* pool_;
};

/** @brief A vector in pinned host memory (see pinned_allocator for what resize(n) leaves uninitialised). */
template <class T>
using pinned_host_vector = std::vector<T, pinned_allocator<T>>;

}  // namespace gpumem

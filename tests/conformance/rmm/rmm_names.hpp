// RMM's C++ names on gpumem: the one header an RMM program includes instead of RMM's headers
// (rmm/cuda_stream.hpp, rmm/cuda_stream_view.hpp, rmm/cuda_stream_pool.hpp, rmm/cuda_device.hpp,
// rmm/device_buffer.hpp, rmm/device_uvector.hpp, rmm/device_scalar.hpp, rmm/prefetch.hpp, rmm/error.hpp,
// rmm/aligned.hpp and rmm/mr/*.hpp). Only renames: each name is gpumem's own entity, so what a test checks
// through it is gpumem's behaviour.
//
// RMM's resource classes are templates over their upstream's type (pool_memory_resource<Upstream>); gpumem's
// take any device_memory_resource*, so the upstream parameter is accepted and ignored. Not renamed, because
// gpumem has no counterpart: resource references (device_async_resource_ref; pass a pointer or reference to
// the resource), owning_wrapper, and the CCCL-only host resources. thrust_allocator and exec_policy need nvcc:
// they are tested in tests/thrust.
#pragma once

#include <gpumem/buffer/device_buffer.hpp>
#include <gpumem/buffer/device_scalar.hpp>
#include <gpumem/buffer/device_uvector.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/cuda_stream_pool.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/cuda_async_managed_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/polymorphic_allocator.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/system_memory_resource.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>
#include <gpumem/prefetch.hpp>

#include <cstddef>

namespace rmm {

// rmm/cuda_stream*.hpp, rmm/cuda_device.hpp
using gpumem::cuda_stream;
using gpumem::cuda_stream_default;
using gpumem::cuda_stream_legacy;
using gpumem::cuda_stream_per_thread;
using gpumem::cuda_stream_pool;
using gpumem::cuda_stream_view;
using gpumem::cuda_device_id;
using gpumem::cuda_set_device_raii;
using gpumem::get_current_cuda_device;
using gpumem::get_num_cuda_devices;

// rmm/device_*.hpp, rmm/prefetch.hpp
using gpumem::device_buffer;
using gpumem::device_scalar;
using gpumem::device_uvector;
using gpumem::prefetch;

// rmm/error.hpp
using gpumem::bad_alloc;
using gpumem::cuda_error;
using gpumem::logic_error;
using gpumem::out_of_memory;
using gpumem::out_of_range;

// rmm/aligned.hpp
inline constexpr std::size_t CUDA_ALLOCATION_ALIGNMENT = gpumem::detail::allocation_alignment;
using gpumem::detail::align_down;
using gpumem::detail::align_up;
using gpumem::detail::is_pow2;
[[nodiscard]] inline bool is_pointer_aligned(void const* ptr, std::size_t alignment = CUDA_ALLOCATION_ALIGNMENT)
{
  return gpumem::detail::is_aligned(ptr, alignment);
}

namespace mr {

using gpumem::mr::device_memory_resource;

// upstream resources
using gpumem::mr::cuda_async_managed_memory_resource;
using gpumem::mr::cuda_async_memory_resource;
using gpumem::mr::cuda_async_view_memory_resource;
using gpumem::mr::cuda_memory_resource;
using gpumem::mr::managed_memory_resource;
using gpumem::mr::system_memory_resource;
using gpumem::mr::is_system_memory_supported;
using gpumem::mr::callback_memory_resource;
using gpumem::mr::allocate_callback_t;
using gpumem::mr::deallocate_callback_t;

// sub-allocators: RMM's upstream template parameter is accepted and ignored
template <class Upstream>
using pool_memory_resource = gpumem::mr::pool_memory_resource;
template <class Upstream>
using arena_memory_resource = gpumem::mr::arena_memory_resource;
template <class Upstream>
using binning_memory_resource = gpumem::mr::binning_memory_resource;
template <class Upstream>
using fixed_size_memory_resource = gpumem::mr::fixed_size_memory_resource;

// adaptors
template <class Upstream>
using aligned_resource_adaptor = gpumem::mr::aligned_resource_adaptor;
template <class Upstream, class ExceptionType = gpumem::out_of_memory>
using failure_callback_resource_adaptor = gpumem::mr::basic_failure_callback_resource_adaptor<ExceptionType>;
using gpumem::mr::failure_callback_t;
template <class Upstream>
using limiting_resource_adaptor = gpumem::mr::limiting_resource_adaptor;
template <class Upstream>
using logging_resource_adaptor = gpumem::mr::logging_resource_adaptor;
template <class Upstream>
using prefetch_resource_adaptor = gpumem::mr::prefetch_resource_adaptor;
template <class Upstream>
using statistics_resource_adaptor = gpumem::mr::statistics_resource_adaptor;
template <class Upstream>
using thread_safe_resource_adaptor = gpumem::mr::thread_safe_resource_adaptor;
template <class Upstream>
using tracking_resource_adaptor = gpumem::mr::tracking_resource_adaptor;

// allocators
using gpumem::mr::polymorphic_allocator;
using gpumem::mr::make_stream_allocator_adaptor;
using gpumem::mr::stream_allocator_adaptor;

// rmm/mr/per_device_resource.hpp
using gpumem::mr::get_current_device_resource;
using gpumem::mr::get_per_device_resource;
using gpumem::mr::set_current_device_resource;
using gpumem::mr::set_per_device_resource;

}  // namespace mr
}  // namespace rmm

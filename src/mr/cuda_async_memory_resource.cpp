// cuda_async_view_memory_resource and cuda_async_memory_resource: stream-ordered pools through the backend.
#include <gpumem/backend/backend.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>

#include "mr/option_checks.hpp"

#include <cstdint>
#include <limits>
#include <string>

namespace gpumem::mr {

cuda_async_view_memory_resource::cuda_async_view_memory_resource(cudaMemPool_t pool, cuda_device_id device)
  : pool_{pool}, device_{device}
{
  expects(pool_ != nullptr, "the memory pool handle must not be null");
}

cuda_async_view_memory_resource::cuda_async_view_memory_resource(cudaMemPool_t pool)
  : cuda_async_view_memory_resource{pool, get_current_cuda_device()}
{
}

mempool_usage cuda_async_view_memory_resource::usage() const { return detail::get_backend().mempool_get_usage(pool_); }

void cuda_async_view_memory_resource::trim(std::size_t keep_bytes) { detail::get_backend().mempool_trim(pool_, keep_bytes); }

void* cuda_async_view_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* const ptr = detail::get_backend().mempool_malloc_async(pool_, bytes, stream.value());
  if (ptr == nullptr) {
    mempool_usage const u = usage();
    throw_out_of_memory(name(), bytes, device_.value(),
                        "pool reserves " + format_bytes(u.reserved_current) + ", " + format_bytes(u.used_current) +
                          " in use");
  }
  return ptr;
}

void cuda_async_view_memory_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, cuda_stream_view stream) noexcept
{
  detail::get_backend().mempool_free_async(ptr, stream.value());
}

shareable_memory cuda_async_view_memory_resource::do_shareable(void const* ptr, std::size_t bytes) const
{
  detail::backend& be = detail::get_backend();
  shareable_memory result;
  result.how = shareable_memory::mechanism::async_pool;
  result.device = device_.value();
  result.bytes = bytes;
  result.pool_fd = owned_fd{be.mempool_export_handle(pool_)};
  result.cuda_data = be.mempool_export_pointer(ptr);
  return result;
}

bool cuda_async_view_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  auto const* view = dynamic_cast<cuda_async_view_memory_resource const*>(&other);
  return view != nullptr && view->pool_ == pool_;
}

cudaMemPool_t default_memory_pool(cuda_device_id device)
{
  check_device_id(device);
  return detail::get_backend().mempool_default(device.value());
}

void set_release_threshold(cudaMemPool_t pool, std::uint64_t bytes)
{
  expects(pool != nullptr, "the memory pool handle must not be null");
  detail::get_backend().mempool_set_release_threshold(pool, bytes);
}

namespace {

mempool_handle_type to_backend(std::optional<cuda_async_memory_resource::allocation_handle_type> type)
{
  using handle = cuda_async_memory_resource::allocation_handle_type;
  switch (type.value_or(handle::none)) {
    case handle::posix_file_descriptor: return mempool_handle_type::posix_file_descriptor;
    case handle::fabric: return mempool_handle_type::fabric;
    case handle::none: break;
  }
  return mempool_handle_type::none;
}

cudaMemPool_t create_pool(std::optional<std::size_t> initial, std::optional<cuda_async_memory_resource::allocation_handle_type> type,
                          std::optional<std::size_t> maximum)
{
  constexpr char const* resource_name = "gpumem::mr::cuda_async_memory_resource";
  if (initial) {
    (void)detail::round_up_option(resource_name, "initial_pool_size", *initial, detail::allocation_alignment);
  }
  if (maximum && *maximum == 0) {  // CUDA reads a maxSize of 0 as "no cap"
    detail::throw_option_error(resource_name, "maximum_pool_size", 0,
                               "would allow no allocation (leave it unset for no cap)");
  }
  if (initial && maximum) {
    expects(*initial <= *maximum, "the initial pool size (" + format_bytes(*initial) +
                                    ") exceeds the maximum pool size (" + format_bytes(*maximum) + ")");
  }
  auto& backend = detail::get_backend();
  int const device = backend.current_device();
  if (!backend.properties(device).memory_pools_supported) {
    throw cuda_error(cudaErrorNotSupported, "device " + std::to_string(device) + " (" +
                                              backend.properties(device).name +
                                              ") does not support stream-ordered memory pools (cudaMallocAsync)");
  }
  bool const fabric = type == cuda_async_memory_resource::allocation_handle_type::fabric;
  std::string const device_text = "device " + std::to_string(device) + " (" + backend.properties(device).name + ")";
  if (fabric && !backend.properties(device).fabric_handles_supported) {
    throw cuda_error(cudaErrorNotSupported, device_text + " cannot export fabric handles (the driver's "
                                              "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0), so its pool "
                                              "cannot be made with the fabric handle type");
  }
  try {
    return backend.mempool_create(device, to_backend(type), maximum.value_or(0));
  } catch (cuda_error const& e) {
    if (!fabric) { throw; }
    throw cuda_error(e.code(), device_text + ": a pool with fabric handles could not be made (fabric handles "
                                              "need the IMEX service where the system has one): " + e.what());
  }
}

}  // namespace

cuda_async_memory_resource::cuda_async_memory_resource(std::optional<std::size_t> initial_pool_size,
                                                       std::optional<std::size_t> release_threshold,
                                                       std::optional<allocation_handle_type> export_handle_type,
                                                       std::optional<std::size_t> maximum_pool_size)
  : cuda_async_view_memory_resource{create_pool(initial_pool_size, export_handle_type, maximum_pool_size),
                                    get_current_cuda_device()},
    export_handle_type_{export_handle_type}
{
  try {
    detail::get_backend().mempool_set_release_threshold(
      pool_handle(), release_threshold.value_or(std::numeric_limits<std::uint64_t>::max()));
    if (initial_pool_size.value_or(0) > 0) {
      // Reserve the initial size: allocate it once and free it, so the pool keeps it cached.
      void* const ptr = allocate(*initial_pool_size, cuda_stream_default);
      deallocate(ptr, *initial_pool_size, cuda_stream_default);
      cuda_stream_default.synchronize();
    }
  } catch (...) {
    detail::get_backend().mempool_destroy(pool_handle());
    throw;
  }
}

cuda_async_memory_resource::~cuda_async_memory_resource() { detail::get_backend().mempool_destroy(pool_handle()); }

shareable_memory cuda_async_memory_resource::do_shareable(void const* ptr, std::size_t bytes) const
{
  expects(export_handle_type_ == allocation_handle_type::posix_file_descriptor,
          "cuda_async_memory_resource cannot share its memory with another process: its pool was made without "
          "export_handle_type posix_file_descriptor (enable_ipc=True in Python); asked for " + std::to_string(bytes) +
            " bytes at " + format_pointer(ptr));
  return cuda_async_view_memory_resource::do_shareable(ptr, bytes);
}

}  // namespace gpumem::mr

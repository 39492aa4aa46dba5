/**
 * @file exec_policy.hpp
 * exec_policy(stream, resource): a Thrust CUDA execution policy that runs on `stream` and takes its
 * temporary storage (sort buffers, reduction scratch) from a gpumem resource through thrust_allocator,
 * as RMM's rmm::exec_policy. Use it in code compiled by nvcc:
 *
 *     thrust::sort(gpumem::mr::exec_policy(stream), keys.begin(), keys.end());
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/thrust_allocator.hpp>

#include <thrust/system/cuda/execution_policy.h>

namespace gpumem::mr {

/**
 * @return thrust::cuda::par with a thrust_allocator<char>(stream, resource) (held by value in the policy),
 *         on `stream`.
 * @throws gpumem::logic_error if `resource` is null.
 * Stream-ordering: the algorithm, its temporary allocations and their deallocation are all on `stream`.
 */
[[nodiscard]] inline auto exec_policy(cuda_stream_view stream = cuda_stream_view{},
                                      device_memory_resource* resource = get_current_device_resource())
{
  return thrust::cuda::par(thrust_allocator<char>{stream, resource}).on(stream.value());
}

}  // namespace gpumem::mr

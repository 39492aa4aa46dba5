/**
 * @file host_memory_resource.hpp
 * The interface of host memory resources: the standard's polymorphic memory resource.
 */
#pragma once

#include <memory_resource>

namespace gpumem::mr {

/**
 * @brief Host memory resources are `std::pmr::memory_resource`s (DESIGN.md, "Memory resources"), so that
 * they work with every pmr container and allocator unchanged.
 *
 * The contract is the standard's: allocate(bytes, alignment) returns memory aligned to `alignment` (a
 * power of two) or throws; allocate(0) returns a valid pointer that must be deallocated like any other;
 * deallocate(p, bytes, alignment) takes the same bytes and alignment as the allocation; is_equal says
 * whether one resource may free the other's memory. Host resources are not stream-ordered: memory is
 * usable by the host when allocate returns and may be reused when deallocate returns.
 *
 * gpumem's implementation: new_delete_resource (new_delete_resource.hpp).
 */
using host_memory_resource = std::pmr::memory_resource;

}  // namespace gpumem::mr

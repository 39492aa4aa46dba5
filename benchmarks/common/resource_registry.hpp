/**
 * @file resource_registry.hpp
 * The benchmarks take the resource under test by name from the one registry of resources
 * (gpumem/registry/resource_registry.hpp, shared with `gpumem replay` and `gpumem bench`; docs/benchmarks.md), so a name means the
 * same configuration in every figure. Beside those names, two deliberately broken resources prove that a
 * benchmark cannot pass silently on a wrong resource (ctest runs them and expects a non-zero exit); they
 * are reachable only by their explicit names (selftest_*), never listed, never in the defaults.
 */
#pragma once

#include <gpumem/registry/resource_registry.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::bench {

using registry::resource_handle;

/** @return the registry's names joined with ", " (the self-tests are not listed). */
[[nodiscard]] std::string known_resource_names();

/**
 * @brief Builds the resource named `name` for a workload whose largest request is `max_request` bytes.
 * @throws std::invalid_argument naming the unknown name and listing the known ones.
 * @throws whatever the resource's constructor throws (gpumem::out_of_memory, gpumem::cuda_error, ...).
 */
[[nodiscard]] resource_handle make_resource(std::string_view name, std::size_t max_request);

/**
 * @brief Splits "a,b,c" and checks every name. An empty string means every registered resource.
 * @throws std::invalid_argument for an unknown name (listing the known ones) or a repeated one.
 */
[[nodiscard]] std::vector<std::string> parse_resource_list(std::string_view comma_separated);

}  // namespace gpumem::bench

// The benchmarks' resources (resource_registry.hpp): the one registry's, plus two broken on purpose.
#include "resource_registry.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace gpumem::bench {
namespace {

// Every allocation is the same address: the second live block overlaps the first. Never dereferenced.
class overlapping_resource final : public mr::device_memory_resource {
  void* do_allocate(std::size_t, cuda_stream_view) override { return block_; }
  void do_deallocate(void*, std::size_t, cuda_stream_view) noexcept override {}
  alignas(256) static inline char block_[256];
};

// The first 8 allocations succeed (from a cuda_memory_resource), then every one fails.
class failing_resource final : public mr::device_memory_resource {
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    if (++calls_ > 8) { throw_out_of_memory("selftest_out_of_memory", bytes, 0, "(injected)"); }
    return upstream_.allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_.deallocate(ptr, bytes, stream);
  }
  mr::cuda_memory_resource upstream_;
  std::atomic<int> calls_{0};
};

[[nodiscard]] bool is_known(std::string_view name)
{
  return registry::find_resource(name) != nullptr || name == "selftest_overlapping" ||
         name == "selftest_out_of_memory";
}

[[noreturn]] void throw_unknown(std::string_view name)
{
  throw std::invalid_argument("unknown resource '" + std::string{name} +
                              "'; known resources: " + known_resource_names());
}

}  // namespace

std::string known_resource_names() { return registry::resource_names(); }

resource_handle make_resource(std::string_view name, std::size_t max_request)
{
  if (name == "selftest_overlapping" || name == "selftest_out_of_memory") {
    resource_handle handle{std::string{name}};
    if (name == "selftest_overlapping") {
      handle.emplace<overlapping_resource>();
    } else {
      handle.emplace<failing_resource>();
    }
    return handle;
  }
  if (registry::find_resource(name) == nullptr) { throw_unknown(name); }
  return registry::make_resource(name, {.max_request = max_request});
}

std::vector<std::string> parse_resource_list(std::string_view comma_separated)
{
  std::vector<std::string> names;
  if (comma_separated.empty()) {
    for (auto const& e : registry::resources()) { names.emplace_back(e.name); }
    return names;
  }
  while (!comma_separated.empty()) {
    std::size_t const comma = comma_separated.find(',');
    std::string_view const name = comma_separated.substr(0, comma);
    comma_separated = comma == std::string_view::npos ? std::string_view{} : comma_separated.substr(comma + 1);
    if (name.empty()) { continue; }
    if (!is_known(name)) { throw_unknown(name); }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw std::invalid_argument("resource '" + std::string{name} + "' named twice");
    }
    names.emplace_back(name);
  }
  if (names.empty()) { throw std::invalid_argument("no resource named; known resources: " + known_resource_names()); }
  return names;
}

}  // namespace gpumem::bench

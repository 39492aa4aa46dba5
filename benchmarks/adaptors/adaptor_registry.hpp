/**
 * @file adaptor_registry.hpp
 * The adaptors that gpumem_bench_adaptors measures, by name, each wrapped directly around a base resource
 * from common/'s registry, with the checks that prove the adaptor did its job during the run (so a
 * benchmark that measures an adaptor doing nothing fails instead of reporting a small overhead).
 *
 * Two baselines: `none` (the base resource itself) and `none_managed` (a pool over managed memory, the
 * base of `prefetch`, whose prefetches need managed memory on a GPU). Every other adaptor names its
 * baseline, and its overhead is quoted against that figure of the same workload in the same run.
 * Adding an adaptor is one entry in adaptor_registry.cpp.
 *
 * Self-tests (reachable by explicit name only, never listed): `selftest_bypassed_statistics` and
 * `selftest_bypassed_logging` build the adaptor but route the calls around it, so its checks must fail
 * the run; ctest runs them to prove that an adaptor doing nothing cannot pass.
 */
#pragma once

#include "../common/resource_registry.hpp"

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::bench {

/**
 * @brief What a benchmark did through its resource since the resource was built; the checks compare the
 * adaptors' own records against it.
 * Invariant: every allocation counted here has been freed when check_idle is called.
 */
struct usage_record {
  std::size_t allocations{};     ///< allocate calls that returned a block
  std::size_t bytes{};           ///< the sum of their requested sizes
  std::size_t peak_bytes_min{};  ///< the live-byte peak was at least this ...
  std::size_t peak_bytes_max{};  ///< ... and at most this (equal when one thread allocates)
};

/**
 * @brief A base resource with one adaptor (or none) on top, owning the whole chain, and the adaptor's
 * checks. Each check returns an empty string, or what is wrong, naming the adaptor.
 * Thread-safety: check_block may be called concurrently (the verification pass of random_mt); the other
 * checks from one thread while no allocation is in flight.
 */
class adapted_resource {
 public:
  explicit adapted_resource(resource_handle chain) noexcept : chain_{std::move(chain)} {}
  virtual ~adapted_resource() = default;
  adapted_resource(adapted_resource const&) = delete;
  adapted_resource& operator=(adapted_resource const&) = delete;
  adapted_resource(adapted_resource&&) = delete;
  adapted_resource& operator=(adapted_resource&&) = delete;

  /** @return the resource under test: the adaptor, or the base itself for a baseline. */
  [[nodiscard]] mr::device_memory_resource& get() const noexcept { return chain_.get(); }

  /** @brief Checks a block just allocated (verification pass only). */
  [[nodiscard]] virtual std::string check_block(void const* /*ptr*/, std::size_t /*bytes*/) const { return {}; }
  /** @brief Checks the adaptor's state while exactly `blocks` blocks of `bytes` each are live. */
  [[nodiscard]] virtual std::string check_live(std::size_t /*blocks*/, std::size_t /*bytes*/) { return {}; }
  /** @brief Checks the adaptor's state when nothing is live, after everything in `usage`. Untimed. */
  [[nodiscard]] virtual std::string check_idle(usage_record const& /*usage*/) { return {}; }

 protected:
  resource_handle chain_;  // [0] bottom ... the adaptor on top
};

/**
 * @brief The resource under test with its adaptor's per-block check (adapted_resource::check_block) on
 * every allocation: a block that fails it is given back and the message thrown as std::runtime_error.
 * For the untimed verification pass only (it adds a call). Thread-safety: as the resource's.
 */
class checked_resource final : public mr::device_memory_resource {
 public:
  /** @pre `adapted` outlives this object. */
  explicit checked_resource(adapted_resource const& adapted) noexcept : adapted_{adapted} {}

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(mr::device_memory_resource const& other) const noexcept override;

  adapted_resource const& adapted_;
};

/** @brief One measured adaptor. */
struct adaptor_entry {
  std::string_view name;
  std::string_view description;
  /** @brief The entry whose figure this one's overhead is quoted against (itself for a baseline). */
  std::string_view baseline;
  /** @brief Builds the adaptor around `base`, which it takes over. */
  std::unique_ptr<adapted_resource> (*build)(resource_handle base);

  [[nodiscard]] bool is_baseline() const noexcept { return name == baseline; }
  /** @brief Runs over pool over managed memory (none_managed) rather than the --resource base. */
  [[nodiscard]] bool managed_base() const noexcept { return baseline == "none_managed"; }
};

/**
 * @return every listed adaptor (not the self-tests), in registration order: each baseline before the
 * adaptors measured against it.
 */
[[nodiscard]] std::span<adaptor_entry const> registered_adaptors() noexcept;

/** @return the registered adaptor names joined with ", ". */
[[nodiscard]] std::string known_adaptor_names();

/**
 * @brief Splits "a,b,c" into entries, adds the baseline of each named adaptor, and returns them in
 * registration order (so a baseline always runs before the adaptors compared with it).
 * An empty string means every registered adaptor (not the self-tests, which are found by name only).
 * @throws std::invalid_argument for an unknown name (listing the known ones), a repeated one, or none.
 */
[[nodiscard]] std::vector<adaptor_entry const*> parse_adaptor_list(std::string_view comma_separated);

/**
 * @brief Takes gpumem_bench_adaptors' own flags out of argv before the shared ones are parsed:
 * --adaptor=a,b (into `adaptors`, through parse_adaptor_list; every adaptor when absent), --list-adaptors
 * (prints them), and the usage lines for --help (left in argv for the shared parser and Google Benchmark).
 * Notes in `resource_given` whether --resource was given (the shared parser reads it).
 * @return an exit code when the program should stop now (0 after --list-adaptors, 2 on a bad --adaptor,
 *         with the error and the known names on stderr), std::nullopt to go on.
 */
[[nodiscard]] std::optional<int> parse_adaptor_options(int& argc, char** argv, std::string_view program,
                                                       bool& resource_given,
                                                       std::vector<adaptor_entry const*>& adaptors);

/**
 * @brief The base that entry `adaptor` runs over: pool over a counted managed_memory_resource for
 * managed_base() entries, otherwise make_resource(base_name, max_request).
 * @throws what make_resource and the resources' constructors throw.
 */
[[nodiscard]] resource_handle make_base(adaptor_entry const& adaptor, std::string_view base_name,
                                        std::size_t max_request);

/** @brief Deletes the temporary directory of the logging adaptors' files, if one was made. Idempotent. */
void remove_log_directory() noexcept;

}  // namespace gpumem::bench

// The adaptor registry (adaptor_registry.hpp): one entry per measured adaptor in `entries` below (their
// checks: adaptor_checks.hpp), the selection flags, and the bases.

#include "adaptor_registry.hpp"

#include "adaptor_checks.hpp"

#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>

#include <stdlib.h>  // mkdtemp (POSIX)

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <type_traits>
#include <utility>

namespace gpumem::bench {
namespace {

namespace fs = std::filesystem;

/** @brief aligned's configuration: both paths run in `random` (sizes 256 B .. 4 MiB). */
constexpr std::size_t aligned_alignment = 4096;
constexpr std::size_t aligned_threshold = std::size_t{64} << 10;
/** @brief limiting's cap: far above anything the workloads hold live (random: at most 1000 x 4 MiB). */
constexpr std::size_t limiting_cap = std::size_t{1} << 40;

/** @brief Constructs `Adaptor(&chain.get(), args...)` on top of `chain`, which then owns it. */
template <class Adaptor, class... Args>
Adaptor* wrap(resource_handle& chain, Args&&... args)
{
  mr::device_memory_resource* const below = &chain.get();
  return chain.emplace<Adaptor>(below, std::forward<Args>(args)...);
}

// ---- the logging adaptors' files ------------------------------------------------------------------------

std::mutex g_log_directory_mutex;
fs::path g_log_directory;  // guarded by g_log_directory_mutex; empty until the first logging adaptor
std::atomic<unsigned> g_log_files{0};

/** @return a new file name in the run's temporary directory (made on first use). */
[[nodiscard]] fs::path new_log_file()
{
  std::lock_guard const lock{g_log_directory_mutex};
  if (g_log_directory.empty()) {
    std::string name = (fs::temp_directory_path() / "gpumem_bench_adaptors.XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + name);
    }
    g_log_directory = name;
  }
  return g_log_directory / ("log_" + std::to_string(g_log_files.fetch_add(1)) + ".csv");
}

/** @brief An adaptor with no state to check (or no adaptor): the verification pass is its check. */
template <class Adaptor = void>
std::unique_ptr<adapted_resource> build_plain(resource_handle base)
{
  if constexpr (!std::is_void_v<Adaptor>) { wrap<Adaptor>(base); }
  return std::make_unique<adapted_resource>(std::move(base));
}

// Registered adaptors. A baseline comes before the adaptors measured against it (registration order is run
// order), so that its figure exists when theirs is computed.
constexpr std::array entries{
  adaptor_entry{"none", "no adaptor: the base resource itself (--resource, default pool)", "none", build_plain<>},
  adaptor_entry{"logging", "logging_resource_adaptor, to a file in a temporary directory, buffered (its default)",
                "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  fs::path file = new_log_file();
                  auto* const log = wrap<mr::logging_resource_adaptor>(base, file.string());
                  return check_logging(std::move(base), log, std::move(file));
                }},
  adaptor_entry{"statistics", "statistics_resource_adaptor", "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  auto* const stats = wrap<mr::statistics_resource_adaptor>(base);
                  return check_statistics(std::move(base), stats);
                }},
  adaptor_entry{"tracking", "tracking_resource_adaptor, without call stacks", "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  auto* const tracker = wrap<mr::tracking_resource_adaptor>(base, false);
                  return check_tracking(std::move(base), tracker);
                }},
  adaptor_entry{"tracking_stacks", "tracking_resource_adaptor, capturing every allocation's call stack", "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  auto* const tracker = wrap<mr::tracking_resource_adaptor>(base, true);
                  return check_tracking(std::move(base), tracker);
                }},
  adaptor_entry{"limiting", "limiting_resource_adaptor, cap 1 TiB (never reached)", "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  auto* const limiter = wrap<mr::limiting_resource_adaptor>(base, limiting_cap);
                  return check_limiting(std::move(base), limiter);
                }},
  adaptor_entry{"failure_callback", "failure_callback_resource_adaptor, a callback that never fires", "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  return with_counting_failure_callback(std::move(base));
                }},
  adaptor_entry{"thread_safe", "thread_safe_resource_adaptor (one mutex around every call)", "none",
                build_plain<mr::thread_safe_resource_adaptor>},
  adaptor_entry{"aligned", "aligned_resource_adaptor, alignment 4096 for requests of 64 KiB and more", "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  auto* const aligner = wrap<mr::aligned_resource_adaptor>(base, aligned_alignment, aligned_threshold);
                  return check_aligned(std::move(base), aligner);
                }},
  adaptor_entry{"none_managed", "no adaptor: pool_memory_resource over managed_memory_resource (prefetch's base)",
                "none_managed", build_plain<>},
  adaptor_entry{"prefetch", "prefetch_resource_adaptor over none_managed's pool over managed memory",
                "none_managed", build_plain<mr::prefetch_resource_adaptor>},
};

/** @brief Forwards to `upstream`: on top of an adaptor, bypassing it, it makes that adaptor do nothing. */
class forwarding_resource final : public mr::resource_adaptor_base {
 public:
  explicit forwarding_resource(mr::device_memory_resource* upstream) : resource_adaptor_base{upstream} {}
};

// Adaptors broken on purpose, which prove that the checks catch an adaptor doing nothing (ctest runs them
// and expects a non-zero exit): the adaptor is built, but the benchmark's calls go around it. Reachable
// only by explicit name; not listed, never in the defaults.
constexpr std::array selftest_entries{
  adaptor_entry{"selftest_bypassed_statistics", "broken on purpose: calls bypass a statistics adaptor", "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  mr::device_memory_resource* const below = &base.get();
                  auto* const stats = wrap<mr::statistics_resource_adaptor>(base);
                  base.emplace<forwarding_resource>(below);
                  return check_statistics(std::move(base), stats);
                }},
  adaptor_entry{"selftest_bypassed_logging", "broken on purpose: calls bypass a logging adaptor", "none",
                [](resource_handle base) -> std::unique_ptr<adapted_resource> {
                  mr::device_memory_resource* const below = &base.get();
                  fs::path file = new_log_file();
                  auto* const log = wrap<mr::logging_resource_adaptor>(base, file.string());
                  base.emplace<forwarding_resource>(below);
                  return check_logging(std::move(base), log, std::move(file));
                }},
};

}  // namespace

std::span<adaptor_entry const> registered_adaptors() noexcept { return entries; }

std::string known_adaptor_names()
{
  std::string names;
  for (auto const& e : entries) {
    if (!names.empty()) { names += ", "; }
    names += e.name;
  }
  return names;
}

std::vector<adaptor_entry const*> parse_adaptor_list(std::string_view comma_separated)
{
  // Registered entries first, then the self-tests, so that registration order is run order.
  std::vector<adaptor_entry const*> all;
  for (auto const& e : entries) { all.push_back(&e); }
  for (auto const& e : selftest_entries) { all.push_back(&e); }
  std::vector<bool> chosen(all.size(), false);
  std::fill_n(chosen.begin(), entries.size(), comma_separated.empty());
  std::vector<std::string_view> named;
  auto const index_of = [&all](std::string_view name) {
    return static_cast<std::size_t>(
      std::find_if(all.begin(), all.end(), [&](auto const* e) { return e->name == name; }) - all.begin());
  };
  while (!comma_separated.empty()) {
    std::size_t const comma = comma_separated.find(',');
    std::string_view const name = comma_separated.substr(0, comma);
    comma_separated = comma == std::string_view::npos ? std::string_view{} : comma_separated.substr(comma + 1);
    if (name.empty()) { continue; }
    std::size_t const i = index_of(name);
    if (i == all.size()) {
      throw std::invalid_argument("unknown adaptor '" + std::string{name} + "'; known adaptors: " +
                                  known_adaptor_names());
    }
    if (std::find(named.begin(), named.end(), name) != named.end()) {
      throw std::invalid_argument("adaptor '" + std::string{name} + "' named twice");
    }
    named.push_back(name);
    chosen[i] = true;
    chosen[index_of(all[i]->baseline)] = true;
  }
  if (std::find(chosen.begin(), chosen.end(), true) == chosen.end()) {
    throw std::invalid_argument("no adaptor named; known adaptors: " + known_adaptor_names());
  }
  std::vector<adaptor_entry const*> result;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (chosen[i]) { result.push_back(all[i]); }
  }
  return result;
}

std::optional<int> parse_adaptor_options(int& argc, char** argv, std::string_view program, bool& resource_given,
                                         std::vector<adaptor_entry const*>& adaptors)
{
  std::optional<std::string> adaptor_flag;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view const arg{argv[i]};
    if (arg.starts_with("--adaptor=") || arg.starts_with("--adaptors=")) {
      adaptor_flag = std::string{arg.substr(arg.find('=') + 1)};
      continue;
    }
    if (arg == "--list-adaptors") {
      for (auto const& a : entries) {
        std::cout << a.name << "  (vs " << a.baseline << ")  " << a.description << "\n";
      }
      return 0;
    }
    if (arg.starts_with("--resource=") || arg.starts_with("--resources=")) { resource_given = true; }
    if (arg == "--help" || arg == "-h") {
      std::cout << "usage: " << program << " [--adaptor=a,b,...] [--resource=NAME] [--smoke] [--min-time=S]"
                << " [--timeout=S] [--list-adaptors] [google benchmark flags]\n"
                << "  --adaptor=a,b    adaptors to measure (default: all); each one's baseline (none or\n"
                << "                   none_managed) is added and runs first\n"
                << "  --list-adaptors  print the adaptors and their baselines, and exit\n"
                << "  --resource=NAME  the one base resource the adaptors wrap (default pool; --list shows the\n"
                << "                   names); prefetch always runs over pool over managed memory\n"
                << "known adaptors: " << known_adaptor_names() << "\n"
                << "The flags shared by gpumem's benchmarks follow (their --resource default does not apply).\n\n";
    }
    argv[kept++] = argv[i];
  }
  argc = kept;
  argv[argc] = nullptr;
  try {
    adaptors = parse_adaptor_list(adaptor_flag.value_or(""));
  } catch (std::exception const& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  }
  return std::nullopt;
}

resource_handle make_base(adaptor_entry const& adaptor, std::string_view base_name, std::size_t max_request)
{
  if (!adaptor.managed_base()) { return make_resource(base_name, max_request); }
  // The registry's `pool` over managed memory: counted the same way, so the two bases differ only there.
  return registry::make_resource("pool", {.managed = true, .max_request = max_request});
}

void remove_log_directory() noexcept
{
  std::lock_guard const lock{g_log_directory_mutex};
  if (g_log_directory.empty()) { return; }
  std::error_code ignored;
  fs::remove_all(g_log_directory, ignored);
  g_log_directory.clear();
}

}  // namespace gpumem::bench

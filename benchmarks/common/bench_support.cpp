// Flags, failure record and run loop shared by the benchmark executables (bench_support.hpp).

#include "bench_support.hpp"

#include "resource_registry.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace gpumem::bench {
namespace {

std::atomic<bool> g_failed{false};

/** @brief The watchdog: one thread that ends the process when a benchmark call outlives the timeout. */
class watchdog {
 public:
  explicit watchdog(double seconds)
    : limit_{std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds))},
      seconds_{seconds},
      thread_{[this] { watch(); }}
  {
  }
  ~watchdog()
  {
    {
      std::lock_guard const lock{mutex_};
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  watchdog(watchdog const&) = delete;
  watchdog& operator=(watchdog const&) = delete;

  void enter(std::string const& id)
  {
    std::lock_guard const lock{mutex_};
    current_ = id;
    started_ = std::chrono::steady_clock::now();
  }
  void leave()
  {
    std::lock_guard const lock{mutex_};
    current_.clear();
  }

 private:
  void watch()
  {
    std::unique_lock lock{mutex_};
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds{200});
      if (!current_.empty() && std::chrono::steady_clock::now() - started_ > limit_) {
        std::cerr << "FAILED: " << current_ << ": still running after " << seconds_
                  << " s (--timeout); exiting with status 3" << std::endl;
        std::_Exit(3);
      }
    }
  }

  std::chrono::steady_clock::duration limit_;
  double seconds_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string current_;  // the benchmark call under way, empty between calls
  std::chrono::steady_clock::time_point started_;
  bool stop_{false};
  std::thread thread_;  // last: starts once the members above exist
};

std::unique_ptr<watchdog> g_watchdog;

void print_usage(std::string_view program)
{
  std::cout << "usage: " << program << " [--resource=a,b,...] [--smoke] [--min-time=SECONDS] [--list]"
            << " [google benchmark flags]\n"
            << "  --resource=a,b   resources to run (default: all; env GPUMEM_BENCH_RESOURCES)\n"
            << "  --list           print the registered resources and exit\n"
            << "  --smoke          tiny sizes, fixed iteration counts (ctest); default resources: the\n"
            << "                   cudaMalloc peer and the first sub-allocator\n"
            << "  --min-time=S     minimum seconds per benchmark\n"
            << "  --timeout=S      fail (exit 3) when one benchmark call runs longer (default 300; smoke 60)\n"
            << "known resources: " << known_resource_names() << "\n"
            << "Google Benchmark's flags follow (e.g. --benchmark_filter, --benchmark_repetitions,\n"
            << "--benchmark_out=FILE --benchmark_out_format=json).\n";
}

std::vector<std::string> smoke_default_resources()
{
  std::vector<std::string> names{"cuda"};
  for (auto const& e : registry::resources()) {
    if (!e.peer) {
      names.emplace_back(e.name);
      break;
    }
  }
  return names;
}

}  // namespace

std::optional<int> parse_options(int& argc, char** argv, std::string_view program, options& out)
{
  std::optional<std::string> resource_flag;
  std::optional<double> timeout;
  bool help = false;
  int kept = 1;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string_view const arg{argv[i]};
      if (arg.starts_with("--resource=") || arg.starts_with("--resources=")) {
        resource_flag = std::string{arg.substr(arg.find('=') + 1)};
      } else if (arg == "--list") {
        for (auto const& e : registry::resources()) {
          std::cout << e.name << (e.peer ? "  (peer)  " : "  ") << e.description << "\n";
        }
        return 0;
      } else if (arg == "--smoke") {
        out.smoke = true;
      } else if (arg.starts_with("--min-time=")) {
        std::string const value{arg.substr(arg.find('=') + 1)};
        std::size_t used = 0;
        double const seconds = std::stod(value, &used);
        if (used != value.size() || !(seconds > 0)) { throw std::invalid_argument("bad --min-time: " + value); }
        out.min_time = seconds;
      } else if (arg.starts_with("--timeout=")) {
        std::string const value{arg.substr(arg.find('=') + 1)};
        std::size_t used = 0;
        double const seconds = std::stod(value, &used);
        if (used != value.size() || !(seconds > 0)) { throw std::invalid_argument("bad --timeout: " + value); }
        timeout = seconds;
      } else if (arg == "--help" || arg == "-h") {
        help = true;
        argv[kept++] = argv[i];  // Google Benchmark prints its own help after ours
      } else {
        argv[kept++] = argv[i];
      }
    }
    argc = kept;
    argv[argc] = nullptr;
    out.timeout = timeout.value_or(out.smoke ? 60.0 : 300.0);
    if (help) {
      print_usage(program);
      return std::nullopt;
    }
    if (!resource_flag) {
      if (char const* env = std::getenv("GPUMEM_BENCH_RESOURCES"); env != nullptr && *env != '\0') {
        resource_flag = env;
      }
    }
    if (resource_flag) {
      out.resources = parse_resource_list(*resource_flag);
    } else {
      out.resources = out.smoke ? smoke_default_resources() : parse_resource_list("");
    }
  } catch (std::exception const& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  }
  return std::nullopt;
}

void record_failure(std::string const& message)
{
  g_failed.store(true);
  std::cerr << "FAILED: " << message << std::endl;
}

void record_failure(benchmark::State& state, std::string const& message)
{
  record_failure(message);
  state.SkipWithError(message.c_str());
}

watchdog_scope::watchdog_scope(std::string const& benchmark_id)
{
  if (g_watchdog) { g_watchdog->enter(benchmark_id); }
}

watchdog_scope::~watchdog_scope()
{
  if (g_watchdog) { g_watchdog->leave(); }
}

int run_benchmarks(int argc, char** argv, double timeout_seconds)
{
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) { return 2; }
  g_watchdog = std::make_unique<watchdog>(timeout_seconds);
  std::size_t const ran = benchmark::RunSpecifiedBenchmarks();
  g_watchdog.reset();
  benchmark::Shutdown();
  if (ran == 0) {
    std::cerr << "FAILED: no benchmark ran (check --benchmark_filter and --resource)\n";
    return 1;
  }
  return g_failed.load() ? 1 : 0;
}

}  // namespace gpumem::bench

// `gpumem bench [--workload LIST] [--resource LIST] [--repeat N] [--quick] [--csv]`: docs/benchmarks.md's
// allocation workloads (fixed/<size>, random, random_mt/<T>) on resources from the replay registry, each on
// a fresh resource; one row per workload and resource with the median ns/op of the timed passes. A resource
// that fails a workload (out of memory, a failed check) gets a row that says so, and the others still run;
// what the library logs meanwhile is counted and summarised per row (library_log.hpp). The workloads and
// their timing are the library's (bench/workload.hpp, bench/measure.hpp).
#include "commands.hpp"
#include "compact_bytes.hpp"
#include "csv_field.hpp"
#include "library_log.hpp"

#include <gpumem/bench/measure.hpp>
#include <gpumem/bench/workload.hpp>
#include <gpumem/cuda_stream_pool.hpp>
#include <gpumem/registry/resource_registry.hpp>
#include <gpumem/report/text_table.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::cli {
namespace {

constexpr std::string_view workload_names = "fixed, random, random_mt";

struct bench_command {
  std::vector<std::string> workloads{"fixed", "random", "random_mt"};  // --workload: names, maybe repeated
  std::vector<std::string> resources;
  std::size_t repeats{5};
  bool quick{false};
  bool csv{false};
};

/// One output row: a measurement, or why there is none.
struct row {
  std::string workload;
  std::string resource;
  bench::measurement m;
  std::optional<std::size_t> peak_upstream;
  bool reserves_upfront{};
  std::string failure;  // empty: measured
};

/// The bench table's columns.
text_table const& bench_table()
{
  static text_table const table{{{"workload", 14, true}, {"resource", 11, true}, {"ns/op", 10}, {"min", 10},
                                 {"max", 10}, {"peak upstream", 14}, {"peak live", 12}, {"ratio", 8}}};
  return table;
}

void print_failure(row const& r, bool csv, std::ostream& out)
{
  if (csv) {
    out << csv_field(r.workload) << ',' << csv_field(r.resource) << ",,,,,,,,," << csv_field(r.failure) << '\n';
  } else {
    char head[64];
    std::snprintf(head, sizeof head, "%-14s %-11s ", r.workload.c_str(), r.resource.c_str());
    out << head << "failed: " << r.failure << '\n';
  }
  out.flush();
}

void print(row const& r, bool csv, std::ostream& out)
{
  if (!r.failure.empty()) {
    print_failure(r, csv, out);
    return;
  }
  auto const [min_it, max_it] = std::minmax_element(r.m.ns_per_op.begin(), r.m.ns_per_op.end());
  double const median = r.m.median_ns_per_op();
  std::optional<double> ratio;
  if (r.peak_upstream && r.m.peak_live_bytes > 0 && !r.reserves_upfront) {
    ratio = static_cast<double>(*r.peak_upstream) / static_cast<double>(r.m.peak_live_bytes);
  }
  if (csv) {
    std::string const upstream = r.peak_upstream ? std::to_string(*r.peak_upstream) : "";
    std::string const fragmentation = ratio ? std::to_string(*ratio) : "";
    char line[320];
    std::snprintf(line, sizeof line, "%s,%s,%.2f,%.2f,%.2f,%zu,%zu,%s,%zu,%s,\n", csv_field(r.workload).c_str(),
                  csv_field(r.resource).c_str(), median, *min_it, *max_it, r.m.ns_per_op.size(), r.m.ops_per_pass,
                  upstream.c_str(), r.m.peak_live_bytes, fragmentation.c_str());
    out << line;
  } else {
    out << bench_table().row(std::vector<std::string>{
      r.workload, r.resource, fit_number(median, 1, 10), fit_number(*min_it, 1, 10), fit_number(*max_it, 1, 10),
      r.peak_upstream ? compact_bytes(*r.peak_upstream) : "-", compact_bytes(r.m.peak_live_bytes),
      ratio ? fit_number(*ratio, 3, 8) : "-"});
  }
  out.flush();
}

bool runs(bench_command const& c, std::string_view workload)
{
  return std::find(c.workloads.begin(), c.workloads.end(), workload) != c.workloads.end();
}

int run_bench(bench_command const& c, std::ostream& out)
{
  bench::random_shape const shape = c.quick ? bench::random_smoke : bench::random_full;
  double const min_seconds = c.quick ? 0.002 : 0.05;
  constexpr std::size_t thread_counts[] = {4, 16};

  if (c.csv) {
    out << "workload,resource,ns_per_op_median,ns_per_op_min,ns_per_op_max,repeats,ops_per_pass,"
           "peak_upstream_bytes,peak_live_bytes,fragmentation,failure\n";
  } else {
    out << "gpumem bench: median of " << c.repeats << " timed passes after an untimed verification pass"
        << (c.quick ? " (--quick: small workloads)" : "") << "\n";
    out << bench_table().header();
  }

  cuda_stream_pool streams{16};
  std::vector<cuda_stream_view> views;
  for (std::size_t i = 0; i < streams.get_pool_size(); ++i) { views.push_back(streams.get_stream(i)); }

  library_log_summary library_log;
  bool any_error = false;  // a failure other than out-of-memory: the exit status says so
  auto const run = [&](std::string const& workload, std::string const& name, auto&& measure) {
    row result{.workload = workload, .resource = name, .m = {}, .peak_upstream = {}, .reserves_upfront = false,
               .failure = {}};
    try {
      registry::resource_handle r = registry::make_resource(name);
      result.reserves_upfront = r.reserves_upfront();
      result.m = measure(r.get());
      if (name != "cuda") { result.peak_upstream = r.peak_upstream_bytes(); }
    } catch (std::bad_alloc const& e) {
      std::string_view const what = e.what();
      result.failure = what.starts_with("out of memory") ? std::string{what} : "out of memory: " + std::string{what};
    } catch (std::exception const& e) {
      result.failure = e.what();
      any_error = true;
    }
    print(result, c.csv, out);
    library_log.report(std::cerr, workload + " on " + name);
  };

  if (runs(c, "fixed")) {
    for (bench::fixed_size const& size : bench::fixed_sizes) {
      std::string const workload = std::string{"fixed/"} + size.label;
      for (std::string const& name : c.resources) {
        run(workload, name, [&](mr::device_memory_resource& mr) {
          return bench::measure_fixed(mr, views[0], size, c.repeats, min_seconds);
        });
      }
    }
  }
  if (runs(c, "random")) {
    std::vector<bench::sequence> const one = bench::split_random(shape, 1);
    for (std::string const& name : c.resources) {
      run("random", name, [&](mr::device_memory_resource& mr) {
        return bench::measure_random(mr, views, one, c.repeats, "random");
      });
    }
  }
  if (runs(c, "random_mt")) {
    for (std::size_t const threads : thread_counts) {
      std::vector<bench::sequence> const split = bench::split_random(shape, threads);
      std::string const workload = "random_mt/" + std::to_string(threads);
      for (std::string const& name : c.resources) {
        run(workload, name, [&](mr::device_memory_resource& mr) {
          return bench::measure_random(mr, views, split, c.repeats, workload);
        });
      }
    }
  }
  return any_error ? 1 : 0;
}

}  // namespace

command add_bench(CLI::App& gpumem)
{
  auto const c = std::make_shared<bench_command>();
  CLI::App* const parser =
    gpumem.add_subcommand("bench", "allocation workloads (docs/benchmarks.md) on resources: ns/op, peak bytes");
  parser
    ->add_option("-w,--workload", c->workloads,
                 "comma-separated workloads to run: " + std::string{workload_names} + " (default: all)")
    ->type_name("LIST")
    ->allow_extra_args(false)
    ->delimiter(',')
    ->check([](std::string const& name) -> std::string {
      if (name == "fixed" || name == "random" || name == "random_mt") { return {}; }
      return "unknown workload '" + name + "'; workloads: " + std::string{workload_names};
    });
  CLI::Option* const resource = add_resource_option(*parser);
  parser->add_option("--repeat", c->repeats, "timed passes per workload and resource; ns/op is their median (default " +
                                               std::to_string(c->repeats) + ")")
    ->type_name("N")
    ->check(whole_number(1, 1000, "needs an integer in [1, 1000]"));
  parser->add_flag("--quick", c->quick, "small workloads and short passes, for a smoke test");
  parser->add_flag("--csv", c->csv, "print CSV instead of a table");
  parser->parse_complete_callback([c, resource] { c->resources = selected_resources(*resource, false); });
  return {parser, [c](std::string const&, std::ostream& out) { return run_bench(*c, out); }};
}

}  // namespace gpumem::cli

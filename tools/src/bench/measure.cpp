// bench/measure.hpp: verification pass, then timed passes, for the fixed and random workloads.
#include <gpumem/bench/measure.hpp>

#include <gpumem/bench/worker_team.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <string>

namespace gpumem::bench {

namespace {

using clock_type = std::chrono::steady_clock;

/// Seconds for `pairs` allocate+free pairs of `bytes` on `stream`.
double time_pairs(mr::device_memory_resource& resource, cuda_stream_view stream, std::size_t bytes,
                  std::size_t pairs)
{
  auto const start = clock_type::now();
  for (std::size_t i = 0; i < pairs; ++i) {
    void* const p = resource.allocate(bytes, stream);
    resource.deallocate(p, bytes, stream);
  }
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// Throws what a worker reported, if anything: gpumem::bad_alloc for an out-of-memory, else logic_error.
void throw_if_failed(first_error& error, std::string const& prefix)
{
  bool const out_of_memory = error.out_of_memory();
  std::string const e = error.take();
  if (out_of_memory) { throw bad_alloc(prefix + e); }
  if (!e.empty()) { throw logic_error(prefix + e); }
}

}  // namespace

double run_sequences(worker_team& team, mr::device_memory_resource& resource, std::span<cuda_stream_view const> streams,
                     std::vector<sequence> const& sequences, std::vector<std::vector<void*>>& slots, first_error& error,
                     std::size_t streams_per_thread)
{
  return team.run([&](std::size_t t) {
    try {
      if (streams_per_thread > 1) {
        run_sequence(resource, streams.subspan(t * streams_per_thread, streams_per_thread), sequences[t], slots[t]);
      } else {
        run_sequence(resource, streams[t], sequences[t], slots[t]);
      }
    } catch (std::bad_alloc const& e) {
      error.set("thread " + std::to_string(t) + ": " + e.what(), true);
    } catch (std::exception const& e) {
      error.set("thread " + std::to_string(t) + ": " + e.what());
    }
  });
}

double median(std::vector<double> values)
{
  if (values.empty()) { return 0.0; }
  std::sort(values.begin(), values.end());
  std::size_t const n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

double measurement::median_ns_per_op() const { return median(ns_per_op); }

measurement measure_fixed(mr::device_memory_resource& resource, cuda_stream_view stream, fixed_size size,
                          std::size_t repeats, double min_seconds)
{
  measurement m;
  m.workload = std::string{"fixed/"} + size.label;
  m.peak_live_bytes = size.bytes;
  {
    block_checker checker;
    void* const a = resource.allocate(size.bytes, stream);
    void* b = nullptr;
    try {
      b = resource.allocate(size.bytes, stream);
    } catch (...) {
      resource.deallocate(a, size.bytes, stream);
      throw;
    }
    std::string error = checker.add(a, size.bytes);
    if (error.empty()) { error = checker.add(b, size.bytes); }
    resource.deallocate(b, size.bytes, stream);
    resource.deallocate(a, size.bytes, stream);
    expects(error.empty(), m.workload + " verification: " + error);
  }
  std::size_t pairs = 16;
  while (time_pairs(resource, stream, size.bytes, pairs) < min_seconds && pairs < (std::size_t{1} << 40)) {
    pairs *= 2;
  }
  m.ops_per_pass = 2 * pairs;
  for (std::size_t r = 0; r < repeats; ++r) {
    double const seconds = time_pairs(resource, stream, size.bytes, pairs);
    m.ns_per_op.push_back(seconds * 1e9 / static_cast<double>(m.ops_per_pass));
  }
  return m;
}

measurement measure_random(mr::device_memory_resource& resource, std::span<cuda_stream_view const> streams,
                           std::vector<sequence> const& sequences, std::size_t repeats, std::string workload_name)
{
  std::size_t const threads = sequences.size();
  expects(threads > 0 && streams.size() >= threads,
          "measure_random: needs one stream per sequence (" + std::to_string(threads) + " sequences, " +
            std::to_string(streams.size()) + " streams)");
  measurement m;
  m.workload = std::move(workload_name);
  for (sequence const& s : sequences) { m.ops_per_pass += s.steps.size(); }
  std::vector<std::vector<void*>> slots(threads);
  for (std::size_t t = 0; t < threads; ++t) { slots[t].assign(sequences[t].slots, nullptr); }

  worker_team team{threads};
  first_error error;
  {
    block_checker checker;
    live_meter meter;
    team.run([&](std::size_t t) {
      bool out_of_memory = false;
      std::string const e =
        run_sequence_checked(resource, streams[t], sequences[t], slots[t], checker, meter, &out_of_memory);
      if (!e.empty()) { error.set("thread " + std::to_string(t) + ": " + e, out_of_memory); }
    });
    throw_if_failed(error, m.workload + " verification: ");
    m.peak_live_bytes = meter.peak.load();
  }
  for (std::size_t r = 0; r < repeats; ++r) {
    double const seconds = run_sequences(team, resource, streams, sequences, slots, error);
    throw_if_failed(error, m.workload + ": ");
    m.ns_per_op.push_back(seconds * 1e9 / static_cast<double>(m.ops_per_pass));
  }
  return m;
}

}  // namespace gpumem::bench

// Replaying an allocation log (replay.hpp): rows are read in batches; the planner (replay_plan.hpp) turns
// each batch into operations on slots, outside the timed part; the timed loop walks them, on the calling
// thread or, for replay_options::threads != 1, on worker threads (replay_threads.hpp). Memory: one batch,
// the planner's live blocks, streams and thread ids, and one table entry per slot in use.
#include <gpumem/replay/replay.hpp>

#include "replay/replay_execute.hpp"
#include "replay/replay_plan.hpp"
#include "replay/replay_threads.hpp"

#include <gpumem/error.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace gpumem {

namespace {

using detail::replay_batch;
using detail::replay_op;
using detail::replay_op_kind;
using detail::replay_planner;

/// Rows per batch: large enough that a clock read per batch costs nothing, small enough to stay in cache.
constexpr std::size_t batch_rows = std::size_t{1} << 14;

/// The rows of a log, batch by batch.
class row_batches {
 public:
  row_batches() = default;
  virtual ~row_batches() = default;
  row_batches(row_batches const&) = delete;
  row_batches& operator=(row_batches const&) = delete;
  row_batches(row_batches&&) = delete;
  row_batches& operator=(row_batches&&) = delete;

  /// @return the next rows, valid until the next call; empty at the end.
  [[nodiscard]] virtual std::span<log_event const> next() = 0;
  [[nodiscard]] virtual std::optional<double> fraction_read() const noexcept = 0;
};

class reader_batches final : public row_batches {
 public:
  explicit reader_batches(allocation_log_reader& reader) : reader_{reader}, rows_(batch_rows) {}
  std::span<log_event const> next() override { return {rows_.data(), reader_.read(rows_)}; }
  std::optional<double> fraction_read() const noexcept override { return reader_.fraction_read(); }

 private:
  allocation_log_reader& reader_;
  std::vector<log_event> rows_;
};

class memory_batches final : public row_batches {
 public:
  explicit memory_batches(std::vector<log_event> const& rows) noexcept : rows_{rows} {}
  std::span<log_event const> next() override
  {
    std::size_t const n = std::min(batch_rows, rows_.size() - done_);
    std::span<log_event const> const out{rows_.data() + done_, n};
    done_ += n;
    return out;
  }
  std::optional<double> fraction_read() const noexcept override
  {
    return rows_.empty() ? 1.0 : static_cast<double>(done_) / static_cast<double>(rows_.size());
  }

 private:
  std::vector<log_event> const& rows_;
  std::size_t done_{0};
};

/// Runs operations against the resource and keeps what it holds, per slot.
class executor {
 public:
  executor(mr::device_memory_resource& resource, replay_planner const& planner) noexcept
    : resource_{resource}, planner_{planner}
  {
  }

  void ensure_slots(std::size_t count)
  {
    if (slots_.size() < count) { slots_.resize(count); }
  }

  void execute(replay_op const& o)
  {
    detail::execute_replay_op(resource_, planner_.stream(o.stream), o, slots_.data(), counts);
  }

  /// Frees every block still held, on the stream it was allocated on: after the last row, and on the way
  /// out of an exception. Uses what the executor itself holds, not the planner's tables, which may be a
  /// batch ahead.
  void release_all() noexcept { detail::release_held(resource_, planner_, slots_); }

  detail::replay_counts counts;

 private:
  mr::device_memory_resource& resource_;
  replay_planner const& planner_;
  std::vector<detail::replay_held> slots_;
};

/// Keeps samples evenly spaced over a replay of unknown length: every `stride_`-th operation, the stride
/// doubling (and every other sample dropped) whenever they would exceed the capacity. The first operation
/// is always kept; finish() adds the last.
class timeline_sampler {
 public:
  timeline_sampler(std::vector<replay_timeline::sample>& samples, std::size_t capacity)
    : samples_{samples}, capacity_{std::max<std::size_t>(capacity, 2)}
  {
    samples_.reserve(capacity_ + 1);
  }

  [[nodiscard]] bool wants(std::size_t op) const noexcept { return op == 1 || op % stride_ == 0; }

  void add(replay_timeline::sample const& s)
  {
    samples_.push_back(s);
    if (samples_.size() > capacity_) {
      stride_ *= 2;
      std::erase_if(samples_, [this](replay_timeline::sample const& kept) { return !wants(kept.op); });
    }
  }

  void finish(replay_timeline::sample const& last)
  {
    if (samples_.empty() || samples_.back().op != last.op) { samples_.push_back(last); }
  }

 private:
  std::vector<replay_timeline::sample>& samples_;
  std::size_t capacity_;
  std::size_t stride_{1};
};

/// Calls options.progress with a rising fraction below 1, at most about progress_steps times; 1.0 comes
/// from finish().
class progress_reporter {
 public:
  explicit progress_reporter(replay_options const& options) noexcept
    : callback_{options.progress}, step_{1.0 / static_cast<double>(std::max<std::size_t>(options.progress_steps, 1))}
  {
  }
  void update(std::optional<double> fraction)
  {
    if (!callback_ || !fraction || *fraction >= 1.0 || *fraction < last_ + step_) { return; }
    last_ = *fraction;
    callback_(last_);
  }
  void finish()
  {
    if (callback_) { callback_(1.0); }
  }

 private:
  std::function<void(double)> const& callback_;
  double step_;
  double last_{0.0};
};

/// What running the planned batches gave: the counts, the timed wall time, the workers and their waits, and
/// (on several threads) the most bytes the workers held at once.
struct replay_run {
  detail::replay_counts counts;
  std::chrono::steady_clock::duration elapsed{};
  std::size_t threads{1};
  std::size_t waits{0};
  std::optional<std::size_t> held_peak_bytes{};  // none: the log's peak live bytes (one thread, in log order)
};

/// The single-threaded replay: the calling thread runs every operation, in log order.
replay_run run_in_order(row_batches& rows, mr::device_memory_resource& resource, replay_options const& options,
                        replay_planner& planner, progress_reporter& progress)
{
  executor run{resource, planner};
  replay_batch batch;
  // Reads and plans the next batch, untimed. @return false at the end of the log.
  auto const next_batch = [&] {
    std::span<log_event const> const events = rows.next();
    if (events.empty()) { return false; }
    if (options.on_rows) { options.on_rows(events); }
    planner.plan(events, batch);
    run.ensure_slots(planner.slot_count());
    return true;
  };
  std::chrono::steady_clock::duration elapsed{};
  std::size_t done = 0;  // operations run
  try {
    if (options.timeline == nullptr) {
      // Timed per batch (one clock read per batch); reading, planning and progress are untimed.
      while (next_batch()) {
        auto const start = std::chrono::steady_clock::now();
        for (replay_op const& o : batch.ops) { run.execute(o); }
        elapsed += std::chrono::steady_clock::now() - start;
        progress.update(rows.fraction_read());
      }
    } else {
      // Every operation timed on its own; samples (and their upstream probe) and progress are untimed.
      replay_timeline& timeline = *options.timeline;
      timeline = {};
      timeline_sampler sampler{timeline.samples, options.timeline_samples};
      auto const sample = [&](std::size_t op, std::int64_t time) {
        return replay_timeline::sample{op, time, run.counts.live_bytes,
                                       options.upstream_bytes ? options.upstream_bytes() : std::size_t{0}};
      };
      std::int64_t last_time = 0;
      while (next_batch()) {
        for (std::size_t i = 0; i < batch.ops.size(); ++i) {
          auto const start = std::chrono::steady_clock::now();
          run.execute(batch.ops[i]);
          auto const took = std::chrono::steady_clock::now() - start;
          elapsed += took;
          auto const ns = std::chrono::duration_cast<std::chrono::nanoseconds>(took).count();
          auto const bucket =
            ns <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(ns)) - 1);
          ++timeline.latency_histogram[std::min(bucket, replay_timeline::latency_buckets - 1)];
          ++done;
          last_time = batch.times[i];
          if (sampler.wants(done)) { sampler.add(sample(done, last_time)); }
        }
        progress.update(rows.fraction_read());
      }
      if (done > 0) { sampler.finish(sample(done, last_time)); }
    }
  } catch (...) {
    run.release_all();
    throw;
  }
  run.release_all();
  return {run.counts, elapsed, 1, 0, std::nullopt};
}

/// The replay on several threads (replay_threads.hpp): each batch planned by lane, then run by all workers
/// at once; the next batch is read once every worker has finished this one.
replay_run run_on_threads(row_batches& rows, mr::device_memory_resource& resource, replay_options const& options,
                          replay_planner& planner, progress_reporter& progress)
{
  detail::replay_workers workers{resource, planner};
  replay_batch batch;
  std::chrono::steady_clock::duration elapsed{};
  try {
    for (std::span<log_event const> events = rows.next(); !events.empty(); events = rows.next()) {
      if (options.on_rows) { options.on_rows(events); }
      planner.plan(events, batch);
      workers.prepare(batch, planner.slot_count(), planner.lanes_used());
      elapsed += workers.run();
      progress.update(rows.fraction_read());
    }
  } catch (...) {
    workers.release_all();
    throw;
  }
  workers.release_all();
  return {workers.counts(), elapsed, workers.workers(), workers.waits(), workers.held_peak_bytes()};
}

replay_result run_replay(row_batches& rows, mr::device_memory_resource& resource, replay_options const& options)
{
  if (options.threads != 1) { detail::check_replay_threads(options, detail::resource_type_name(resource)); }
  std::size_t const lanes = options.threads == 0 ? max_replay_threads : options.threads;
  replay_planner planner{options.max_streams, lanes};
  progress_reporter progress{options};
  replay_run const run = lanes == 1 ? run_in_order(rows, resource, options, planner, progress)
                                    : run_on_threads(rows, resource, options, planner, progress);
  progress.finish();

  replay_result result;
  result.events = planner.events();
  result.peak_live_bytes = planner.peak_live_bytes();
  result.held_peak_bytes = run.held_peak_bytes.value_or(result.peak_live_bytes);
  result.unknown_frees = planner.unknown_frees();
  result.missing_frees = planner.missing_frees();
  result.log_failures = planner.log_failures();
  result.streams = planner.stream_ids();
  result.live_at_end = planner.live_blocks();
  detail::replay_counts const& counts = run.counts;
  result.threads = run.threads;
  result.cross_thread_waits = run.waits;
  result.allocations = counts.allocations;
  result.deallocations = counts.deallocations;
  result.ops = counts.allocations + counts.deallocations;
  result.failures = counts.failures;
  result.log_failures_reproduced = counts.reproduced;
  result.skipped_frees = counts.skipped;
  result.elapsed_ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(run.elapsed).count());
  result.ns_per_op = result.ops == 0 ? 0.0 : result.elapsed_ns / static_cast<double>(result.ops);
  if (options.peak_upstream_bytes) {
    result.peak_upstream_bytes = options.peak_upstream_bytes();
    if (result.held_peak_bytes > 0) {
      result.fragmentation =
        static_cast<double>(*result.peak_upstream_bytes) / static_cast<double>(result.held_peak_bytes);
    }
  }
  return result;
}

}  // namespace

replay_result replay(allocation_log_reader& log, mr::device_memory_resource& resource, replay_options const& options)
{
  reader_batches rows{log};
  return run_replay(rows, resource, options);
}

replay_result replay(allocation_log const& log, mr::device_memory_resource& resource, replay_options const& options)
{
  memory_batches rows{log.events};
  return run_replay(rows, resource, options);
}

namespace {
/// `options` with the probes of `resource`.
replay_options with_probes(registry::resource_handle& resource, replay_options options)
{
  if (resource.peak_upstream_bytes()) {
    options.peak_upstream_bytes = [&resource] { return *resource.peak_upstream_bytes(); };
  }
  if (!options.upstream_bytes && resource.upstream_bytes()) {
    options.upstream_bytes = [&resource] { return *resource.upstream_bytes(); };
  }
  return options;
}
}  // namespace

replay_result replay(allocation_log_reader& log, registry::resource_handle& resource, replay_options options)
{
  detail::check_replay_threads(options, resource.name());
  return replay(log, resource.get(), with_probes(resource, std::move(options)));
}

replay_result replay(allocation_log const& log, registry::resource_handle& resource, replay_options options)
{
  detail::check_replay_threads(options, resource.name());
  return replay(log, resource.get(), with_probes(resource, std::move(options)));
}

}  // namespace gpumem

// Replaying an allocation log (replay.hpp): a planning pass resolves the log's pointers to slots and its
// stream ids to streams, then the timed loop walks the flat plan.
#include <gpumem/replay/replay.hpp>

#include <gpumem/cuda_stream.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <vector>

namespace gpumem {

namespace {

enum class op_kind : std::uint8_t {
  allocate,        // slots[slot] = allocate(size, stream)
  deallocate,      // deallocate(slots[slot], size, stream)
  probe_failure,   // an `allocate failure` row: allocate(size, stream), then at once deallocate
};

struct op {
  std::size_t size;
  std::size_t slot;      // unused by probe_failure
  std::uint32_t stream;  // index into plan::streams
  op_kind kind;
};

/// What the timed loop needs: operations, and per slot the size and stream it was allocated with.
struct plan {
  std::vector<op> ops;
  std::vector<std::int64_t> op_time_ns;    // ops[i]'s log row's time (for timelines)
  std::vector<cuda_stream_view> streams;
  std::vector<cuda_stream> owned_streams;  // the log's non-default streams; destroyed after the replay
  std::vector<std::size_t> slot_size;
  std::vector<std::uint32_t> slot_stream;
  std::vector<std::size_t> live_at_end;    // slots never freed by the log
  std::size_t unknown_frees{};
  std::size_t missing_frees{};
  std::size_t log_failures{};
};

[[nodiscard]] plan make_plan(allocation_log const& log)
{
  plan p;
  p.ops.reserve(log.events.size());
  p.op_time_ns.reserve(log.events.size());
  std::unordered_map<std::uintptr_t, std::uint32_t> stream_index;
  auto const stream_of = [&](std::uintptr_t id) -> std::uint32_t {
    auto const [it, inserted] = stream_index.try_emplace(id, static_cast<std::uint32_t>(p.streams.size()));
    if (inserted) {
      if (id == 0) {
        p.streams.push_back(cuda_stream_default);
      } else if (id == reinterpret_cast<std::uintptr_t>(cuda_stream_legacy.value())) {
        p.streams.push_back(cuda_stream_legacy);
      } else if (id == reinterpret_cast<std::uintptr_t>(cuda_stream_per_thread.value())) {
        p.streams.push_back(cuda_stream_per_thread);
      } else {
        p.owned_streams.emplace_back();
        p.streams.push_back(p.owned_streams.back().view());
      }
    }
    return it->second;
  };

  std::unordered_map<std::uintptr_t, std::size_t> live;  // log pointer -> slot
  live.reserve(log.events.size() / 2 + 1);
  for (log_event const& e : log.events) {
    std::uint32_t const stream = stream_of(e.stream);
    switch (e.action) {
      case log_action::allocate: {
        std::size_t const slot = p.slot_size.size();
        p.slot_size.push_back(e.size);
        p.slot_stream.push_back(stream);
        auto const [it, inserted] = live.try_emplace(e.pointer, slot);
        if (!inserted) {  // the log lost the free of the block that lived here before
          ++p.missing_frees;
          std::size_t const old = it->second;
          p.ops.push_back(op{p.slot_size[old], old, p.slot_stream[old], op_kind::deallocate});
          it->second = slot;
        }
        p.ops.push_back(op{e.size, slot, stream, op_kind::allocate});
        break;
      }
      case log_action::free: {
        auto const it = live.find(e.pointer);
        if (it == live.end()) {
          ++p.unknown_frees;
          break;
        }
        std::size_t const slot = it->second;
        live.erase(it);
        // The size it was allocated with (a resource needs that one), on the stream of the free row.
        p.ops.push_back(op{p.slot_size[slot], slot, stream, op_kind::deallocate});
        break;
      }
      case log_action::allocate_failure:
        ++p.log_failures;
        p.ops.push_back(op{e.size, 0, stream, op_kind::probe_failure});
        break;
    }
    p.op_time_ns.resize(p.ops.size(), e.time_ns);  // the operations this row added happen at its time
  }
  p.live_at_end.reserve(live.size());
  for (auto const& [pointer, slot] : live) { p.live_at_end.push_back(slot); }
  std::sort(p.live_at_end.begin(), p.live_at_end.end());  // deterministic order of the final frees
  return p;
}

/// The address that marks a slot whose allocation this resource failed (never dereferenced).
char failed_marker;

}  // namespace

replay_result replay(allocation_log const& log, mr::device_memory_resource& resource, replay_options const& options)
{
  plan const p = make_plan(log);

  replay_result result;
  result.events = log.events.size();
  result.peak_live_bytes = peak_live_bytes(log);
  result.unknown_frees = p.unknown_frees;
  result.missing_frees = p.missing_frees;
  result.log_failures = p.log_failures;
  result.streams = p.streams.size();
  result.live_at_end = p.live_at_end.size();

  void* const failed = &failed_marker;
  std::vector<void*> slots(p.slot_size.size(), nullptr);

  // Frees every block still held: after the loop, and on the way out of an exception.
  auto const release_all = [&]() noexcept {
    for (std::size_t slot = 0; slot < slots.size(); ++slot) {
      void*& ptr = slots[slot];
      if (ptr != nullptr && ptr != failed) {
        resource.deallocate(ptr, p.slot_size[slot], p.streams[p.slot_stream[slot]]);
      }
      ptr = nullptr;
    }
  };

  std::size_t const total = p.ops.size();
  std::size_t allocations = 0;
  std::size_t deallocations = 0;
  std::size_t failures = 0;
  std::size_t reproduced = 0;
  std::size_t skipped = 0;
  std::size_t live_bytes = 0;  // what the replay holds from the resource (kept only for timelines)

  // One operation of the plan; everything the timed loops do besides reading the clock.
  auto const execute = [&](op const& o) {
    cuda_stream_view const stream = p.streams[o.stream];
    switch (o.kind) {
      case op_kind::allocate:
        ++allocations;
        try {
          slots[o.slot] = resource.allocate(o.size, stream);
          live_bytes += o.size;
        } catch (bad_alloc const&) {
          ++failures;
          slots[o.slot] = failed;
        }
        break;
      case op_kind::deallocate: {
        void* const ptr = slots[o.slot];
        slots[o.slot] = nullptr;
        if (ptr == failed) {
          ++skipped;
          break;
        }
        ++deallocations;
        live_bytes -= o.size;
        resource.deallocate(ptr, o.size, stream);
        break;
      }
      case op_kind::probe_failure:
        ++allocations;
        try {
          void* const ptr = resource.allocate(o.size, stream);
          ++deallocations;
          resource.deallocate(ptr, o.size, stream);
        } catch (bad_alloc const&) {
          ++failures;
          ++reproduced;
        }
        break;
    }
  };

  std::chrono::steady_clock::duration elapsed{};
  try {
    if (options.timeline == nullptr) {
      // Timed in chunks (one clock read per chunk); the progress callback runs between chunks, untimed.
      std::size_t const steps = std::max<std::size_t>(options.progress ? options.progress_steps : 1, 1);
      std::size_t const chunk = std::max<std::size_t>(total / steps, 1);
      for (std::size_t begin = 0; begin < total; begin += chunk) {
        std::size_t const end = std::min(begin + chunk, total);
        auto const start = std::chrono::steady_clock::now();
        for (std::size_t i = begin; i < end; ++i) { execute(p.ops[i]); }
        elapsed += std::chrono::steady_clock::now() - start;
        if (options.progress) { options.progress(static_cast<double>(end) / static_cast<double>(total)); }
      }
    } else {
      // Every operation timed on its own; samples (and their upstream probe) and progress are untimed.
      replay_timeline& timeline = *options.timeline;
      timeline = {};
      timeline.samples.reserve(options.timeline_samples + 2);
      std::size_t const wanted = std::max<std::size_t>(options.timeline_samples, 1);
      std::size_t const sample_every = std::max<std::size_t>((total + wanted - 1) / wanted, 1);  // <= wanted samples
      std::size_t const progress_every =
        std::max<std::size_t>(total / std::max<std::size_t>(options.progress_steps, 1), 1);
      for (std::size_t i = 0; i < total; ++i) {
        auto const start = std::chrono::steady_clock::now();
        execute(p.ops[i]);
        auto const took = std::chrono::steady_clock::now() - start;
        elapsed += took;
        auto const ns = std::chrono::duration_cast<std::chrono::nanoseconds>(took).count();
        auto const bucket = ns <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(ns)) - 1);
        ++timeline.latency_histogram[std::min(bucket, replay_timeline::latency_buckets - 1)];
        std::size_t const done = i + 1;
        if (i == 0 || done % sample_every == 0 || done == total) {
          timeline.samples.push_back({done, p.op_time_ns[i], live_bytes,
                                      options.upstream_bytes ? options.upstream_bytes() : std::size_t{0}});
        }
        if (options.progress && (done % progress_every == 0 || done == total)) {
          options.progress(static_cast<double>(done) / static_cast<double>(total));
        }
      }
    }
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
  if (total == 0 && options.progress) { options.progress(1.0); }

  result.allocations = allocations;
  result.deallocations = deallocations;
  result.ops = allocations + deallocations;
  result.failures = failures;
  result.log_failures_reproduced = reproduced;
  result.skipped_frees = skipped;
  result.elapsed_ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  result.ns_per_op = result.ops == 0 ? 0.0 : result.elapsed_ns / static_cast<double>(result.ops);
  if (options.peak_upstream_bytes) {
    result.peak_upstream_bytes = options.peak_upstream_bytes();
    if (result.peak_live_bytes > 0) {
      result.fragmentation =
        static_cast<double>(*result.peak_upstream_bytes) / static_cast<double>(result.peak_live_bytes);
    }
  }
  return result;
}

}  // namespace gpumem

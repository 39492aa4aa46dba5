// The allocation workloads (bench/workload.hpp): sequence generation, the timed loop and the checked pass.
#include <gpumem/bench/workload.hpp>

#include <gpumem/error.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <iterator>
#include <limits>
#include <new>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace gpumem::bench {

namespace {

/// Uniform double in [0, 1) from 53 bits of a std::mt19937_64 (whose output the standard fixes).
[[nodiscard]] double uniform01(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1.0p-53; }

/// Frees what steps[0, done) left live (after a failure part-way), each block on stream_of(its slot). Never throws.
template <class StreamOf>
void free_leftovers(mr::device_memory_resource& resource, StreamOf stream_of, sequence const& seq, std::size_t done,
                    std::span<void*> slots) noexcept
{
  std::vector<std::uint32_t> live_size(seq.slots, 0);
  for (std::size_t i = 0; i < done; ++i) {
    live_size[seq.steps[i].slot] = seq.steps[i].allocate ? seq.steps[i].size : 0;
  }
  for (std::size_t s = 0; s < seq.slots; ++s) {
    if (live_size[s] != 0) { resource.deallocate(slots[s], live_size[s], stream_of(s)); }
  }
}

/// The timed loop, each block allocated and freed on stream_of(its slot).
template <class StreamOf>
void run_steps(mr::device_memory_resource& resource, StreamOf stream_of, sequence const& seq, std::span<void*> slots)
{
  std::size_t i = 0;
  try {
    for (std::size_t const n = seq.steps.size(); i < n; ++i) {
      step const s = seq.steps[i];
      if (s.allocate) {
        slots[s.slot] = resource.allocate(s.size, stream_of(s.slot));
      } else {
        resource.deallocate(slots[s.slot], s.size, stream_of(s.slot));
      }
    }
  } catch (...) {
    free_leftovers(resource, stream_of, seq, i, slots);
    throw;
  }
}

/// The verification pass, each block allocated and freed on stream_of(its slot).
template <class StreamOf>
std::string run_steps_checked(mr::device_memory_resource& resource, StreamOf stream_of, sequence const& seq,
                              std::span<void*> slots, block_checker& checker, live_meter& meter, bool* out_of_memory)
{
  if (out_of_memory != nullptr) { *out_of_memory = false; }
  std::size_t i = 0;
  std::string error;
  try {
    for (std::size_t const n = seq.steps.size(); i < n; ++i) {
      step const s = seq.steps[i];
      if (s.allocate) {
        void* const p = resource.allocate(s.size, stream_of(s.slot));
        slots[s.slot] = p;
        error = checker.add(p, s.size);
        if (!error.empty()) {
          ++i;  // p is live: free it with the others
          break;
        }
        meter.add(s.size);
      } else {
        checker.remove(slots[s.slot]);
        meter.sub(s.size);
        resource.deallocate(slots[s.slot], s.size, stream_of(s.slot));
      }
    }
  } catch (std::bad_alloc const& e) {
    error = e.what();
    if (out_of_memory != nullptr) { *out_of_memory = true; }
  } catch (std::exception const& e) {
    error = e.what();
  }
  if (!error.empty()) { free_leftovers(resource, stream_of, seq, i, slots); }
  return error;
}

/// stream_of for one stream.
[[nodiscard]] auto one_stream(cuda_stream_view stream)
{
  return [stream](std::size_t) { return stream; };
}

/// stream_of for several: slot k's blocks live on streams[k % streams.size()].
[[nodiscard]] auto round_robin(std::span<cuda_stream_view const> streams)
{
  expects(!streams.empty(), "run_sequence: the span of streams is empty");
  return [streams](std::size_t slot) { return streams[slot % streams.size()]; };
}

}  // namespace

sequence make_sequence(std::size_t steps, std::size_t max_live, random_shape const& shape, std::uint64_t seed)
{
  expects(max_live > 0 && max_live <= std::size_t{std::numeric_limits<std::uint16_t>::max()} + 1,
          "make_sequence: the live limit must be in [1, 65536], not " + std::to_string(max_live));
  expects(shape.min_size > 0 && shape.min_size <= shape.max_size &&
            shape.max_size <= std::numeric_limits<std::uint32_t>::max(),
          "make_sequence: sizes must satisfy 0 < min_size <= max_size < 2^32, not [" +
            std::to_string(shape.min_size) + ", " + std::to_string(shape.max_size) + "]");
  std::mt19937_64 gen{seed};
  double const log_min = std::log(static_cast<double>(shape.min_size));
  double const log_max = std::log(static_cast<double>(shape.max_size));
  sequence seq;
  seq.slots = max_live;
  seq.steps.reserve(steps + max_live);
  std::vector<std::uint16_t> free_slots;  // a stack; slot 0 on top
  for (std::size_t s = max_live; s > 0; --s) { free_slots.push_back(static_cast<std::uint16_t>(s - 1)); }
  std::vector<std::uint16_t> live;  // slots of live blocks, in no particular order
  std::vector<std::uint32_t> slot_size(max_live, 0);
  std::size_t live_bytes = 0;
  for (std::size_t i = 0; i < steps; ++i) {
    bool const coin = uniform01(gen) < 0.5;
    bool const allocate = live.empty() || (coin && live.size() < max_live);
    if (allocate) {
      double const size_real = std::exp(log_min + uniform01(gen) * (log_max - log_min));
      auto const size = static_cast<std::uint32_t>(
        std::clamp(static_cast<std::size_t>(std::llround(size_real)), shape.min_size, shape.max_size));
      std::uint16_t const slot = free_slots.back();
      free_slots.pop_back();
      live.push_back(slot);
      slot_size[slot] = size;
      seq.steps.push_back({size, slot, true});
      ++seq.allocations;
      seq.bytes_allocated += size;
      live_bytes += size;
      seq.peak_live_bytes = std::max(seq.peak_live_bytes, live_bytes);
      seq.peak_live_blocks = std::max(seq.peak_live_blocks, live.size());
    } else {
      auto index = static_cast<std::size_t>(uniform01(gen) * static_cast<double>(live.size()));
      index = std::min(index, live.size() - 1);
      std::uint16_t const slot = live[index];
      live[index] = live.back();
      live.pop_back();
      free_slots.push_back(slot);
      seq.steps.push_back({slot_size[slot], slot, false});
      live_bytes -= slot_size[slot];
    }
  }
  for (std::uint16_t const slot : live) { seq.steps.push_back({slot_size[slot], slot, false}); }
  return seq;
}

std::vector<sequence> split_random(random_shape const& shape, std::size_t threads)
{
  expects(threads > 0 && threads <= shape.max_live,
          "split_random: thread count must be in [1, live limit " + std::to_string(shape.max_live) + "], not " +
            std::to_string(threads));
  std::vector<sequence> out;
  out.reserve(threads);
  for (std::size_t t = 0; t < threads; ++t) {
    std::size_t const steps = shape.steps / threads + (t < shape.steps % threads ? 1 : 0);
    std::size_t const max_live = shape.max_live / threads + (t < shape.max_live % threads ? 1 : 0);
    out.push_back(make_sequence(steps, max_live, shape, shape.seed + t));
  }
  return out;
}

std::string block_checker::add(void const* ptr, std::size_t bytes)
{
  auto const begin = reinterpret_cast<std::uintptr_t>(ptr);
  if (ptr == nullptr) { return "allocate(" + std::to_string(bytes) + ") returned nullptr"; }
  if (begin % detail::allocation_alignment != 0) {
    return "allocate(" + std::to_string(bytes) + ") returned " + format_pointer(ptr) + ", not 256-byte aligned";
  }
  std::uintptr_t const end = begin + bytes;
  std::lock_guard const lock{mutex_};
  auto const next = live_.lower_bound(begin);
  if (next != live_.end() && next->first < end) {
    return "block " + format_pointer(ptr) + " +" + std::to_string(bytes) + " overlaps the live block at " +
           format_pointer(reinterpret_cast<void const*>(next->first));
  }
  if (next != live_.begin() && std::prev(next)->second > begin) {
    return "block " + format_pointer(ptr) + " +" + std::to_string(bytes) + " overlaps the live block at " +
           format_pointer(reinterpret_cast<void const*>(std::prev(next)->first));
  }
  live_.emplace(begin, end);
  return {};
}

void block_checker::remove(void const* ptr)
{
  std::lock_guard const lock{mutex_};
  live_.erase(reinterpret_cast<std::uintptr_t>(ptr));
}

void live_meter::add(std::size_t bytes) noexcept
{
  std::size_t const now = live.fetch_add(bytes) + bytes;
  std::size_t p = peak.load();
  while (now > p && !peak.compare_exchange_weak(p, now)) {}
}

void run_sequence(mr::device_memory_resource& resource, cuda_stream_view stream, sequence const& seq,
                  std::span<void*> slots)
{
  run_steps(resource, one_stream(stream), seq, slots);
}

void run_sequence(mr::device_memory_resource& resource, std::span<cuda_stream_view const> streams,
                  sequence const& seq, std::span<void*> slots)
{
  run_steps(resource, round_robin(streams), seq, slots);
}

std::string run_sequence_checked(mr::device_memory_resource& resource, cuda_stream_view stream, sequence const& seq,
                                 std::span<void*> slots, block_checker& checker, live_meter& meter,
                                 bool* out_of_memory)
{
  return run_steps_checked(resource, one_stream(stream), seq, slots, checker, meter, out_of_memory);
}

std::string run_sequence_checked(mr::device_memory_resource& resource, std::span<cuda_stream_view const> streams,
                                 sequence const& seq, std::span<void*> slots, block_checker& checker,
                                 live_meter& meter, bool* out_of_memory)
{
  return run_steps_checked(resource, round_robin(streams), seq, slots, checker, meter, out_of_memory);
}

}  // namespace gpumem::bench

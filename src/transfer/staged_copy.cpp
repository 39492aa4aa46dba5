// The staged host<->device copies of transfer.hpp, and their configuration.
//
// A copy from or to pinned host memory is one backend memcpy_async. A copy from or to pageable memory is
// cut into chunks of chunk_bytes (the last one shorter) and spread over `lanes` threads (the caller plus
// workers from copy_workers.hpp; one lane below parallel_threshold). Lane l copies chunks l, l + lanes,
// l + 2 lanes, ... through two pinned buffers of its own (staging_pair), so that its memcpy of one chunk
// overlaps the DMA of the previous one:
//   to device: wait for the buffer's previous DMA (its event), memcpy source -> buffer, enqueue the DMA
//              buffer -> device on the caller's stream, record the buffer's event.
//   to host:   enqueue the DMA device -> buffer k % 2 and record its event; then wait for chunk k - 1's
//              event and memcpy its buffer -> destination while chunk k's DMA runs.
// Every DMA goes to the caller's stream, so it is ordered after the work submitted before the call, and work
// submitted after the call sees the data. The buffers come from mr::get_default_pinned_pool() and go back to
// it at the end of each lane: at once when no DMA of theirs is in flight, else with deallocate_async on the
// stream, so no later allocation can hand out a buffer that a copy still reads. The pool keeps the memory, so
// only the first large copy pays for cudaMallocHost (two allocations and their return are two locks and a
// free-list lookup each); stream_throttle bounds what copies to the device leave in flight per stream, so the
// pool does not grow when the host runs ahead of the stream.
//
// Failure: a lane that throws sets `failed` (the others stop before their next chunk) and gives its buffers
// back (in stream order if a DMA of theirs may be in flight); copy_workers rethrows the first exception on
// the calling thread once every lane has returned.
#include "backend/host/host_config.hpp"  // parse_byte_size: the same byte-size syntax as GPUMEM_HOST_MEMORY
#include "transfer/copy_workers.hpp"
#include "transfer/staged_copy.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>
#include <gpumem/transfer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace gpumem {
namespace {

constexpr std::size_t chunk_alignment = 256;
constexpr unsigned max_copy_threads = 64;
static_assert(max_copy_threads - 1 == detail::copy_workers::max_threads, "the caller is one of the threads");

// ---- configuration ------------------------------------------------------------------------------------

struct config_store {
  std::mutex mutex;
  std::optional<transfer_config> config;  // guarded by mutex: empty until read from the environment or set
};

[[nodiscard]] config_store& store()
{
  static auto* const s = new config_store{};  // never destroyed: copies may run from static destructors
  return *s;
}

}  // namespace

transfer_config detail::transfer_config_from_environment()
{
  transfer_config config;
  config.threads = std::min(config.threads, std::max(1U, std::thread::hardware_concurrency()));
  if (char const* chunk = std::getenv("GPUMEM_STAGING_CHUNK"); chunk != nullptr && *chunk != '\0') {
    std::size_t const bytes = detail::host::parse_byte_size(chunk, "GPUMEM_STAGING_CHUNK");
    if (bytes == 0 || bytes % chunk_alignment != 0) {
      throw logic_error("GPUMEM_STAGING_CHUNK=\"" + std::string{chunk} +
                        "\" must be a positive multiple of 256 bytes (examples: 8MiB, 4194304)");
    }
    config.chunk_bytes = bytes;
  }
  if (char const* threads = std::getenv("GPUMEM_COPY_THREADS"); threads != nullptr && *threads != '\0') {
    std::string_view const text{threads};
    unsigned count = 0;
    auto const [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
    if (ec != std::errc{} || rest != text.data() + text.size() || count < 1 || count > max_copy_threads) {
      throw logic_error("GPUMEM_COPY_THREADS=\"" + std::string{text} + "\" must be a whole number from 1 to 64");
    }
    config.threads = count;
  }
  return config;
}

namespace {

// ---- one staged copy ----------------------------------------------------------------------------------

enum class direction : std::uint8_t { to_device, to_host };

/// What the lanes of one staged copy share (read-only but for the two atomics).
struct staged_copy {
  direction dir;
  std::byte* dst;
  std::byte const* src;
  std::size_t bytes;
  std::size_t chunk_bytes;  // every chunk but the last has this size
  std::size_t chunks;
  std::size_t lanes;
  cudaStream_t stream;
  int device;                       // the stream's device: every lane's current device while it copies
  std::atomic<bool> failed{false};  // a lane threw: the others stop before their next chunk
  std::atomic<std::size_t> returned_in_flight{0};  // staging bytes given back with a DMA still in flight
};

/**
 * @brief A lane's two pinned staging buffers, each with the event recorded after its latest DMA.
 * Allocated on first use from the default pinned pool; returned by the destructor, at once when no DMA of the
 * buffer may be in flight, else with deallocate_async on the copy's stream (which never throws), so a
 * buffer is never handed out again while a copy still reads or writes it. Destroys its events (CUDA
 * releases an event whose record is pending once it completes).
 */
class staging_pair {
 public:
  /// `returned_in_flight` counts the bytes that the destructor gives back with a DMA still in flight.
  staging_pair(std::size_t buffer_bytes, cudaStream_t stream, std::atomic<std::size_t>& returned_in_flight)
    : buffer_bytes_{buffer_bytes}, stream_{stream}, returned_in_flight_{returned_in_flight}
  {
  }
  ~staging_pair()
  {
    auto& pool = mr::get_default_pinned_pool();
    auto& backend = detail::get_backend();
    for (slot& s : slots_) {
      if (s.memory != nullptr) {
        if (s.in_flight) {
          pool.deallocate_async(s.memory, buffer_bytes_, stream_);
          returned_in_flight_.fetch_add(buffer_bytes_, std::memory_order_relaxed);
        } else {
          try {
            pool.deallocate(s.memory, buffer_bytes_);
          } catch (std::exception const& e) {  // a pool bug, not the caller's: report it, never throw here
            std::fprintf(stderr, "gpumem: staged copy: returning a staging buffer failed: %s\n", e.what());
          }
        }
      }
      if (s.event != nullptr) { backend.event_destroy(s.event); }
    }
  }
  staging_pair(staging_pair const&) = delete;
  staging_pair& operator=(staging_pair const&) = delete;
  staging_pair(staging_pair&&) = delete;
  staging_pair& operator=(staging_pair&&) = delete;

  /// Buffer `i` (0 or 1), allocated on first use. @throws out_of_memory when the pinned pool has none.
  [[nodiscard]] std::byte* buffer(std::size_t i)
  {
    slot& s = slots_[i];
    if (s.memory == nullptr) {
      s.memory = static_cast<std::byte*>(mr::get_default_pinned_pool().allocate(buffer_bytes_));
    }
    return s.memory;
  }

  /**
   * @brief Call right after a DMA from or to buffer `i` was enqueued. With `will_wait`, records the event
   * that wait(i) waits for; without, wait(i) must synchronise the whole stream (use it for a buffer that
   * will not be waited for: the destructor returns it in stream order).
   */
  void dma_enqueued(std::size_t i, bool will_wait)
  {
    slot& s = slots_[i];
    s.in_flight = true;  // first: if recording fails, the buffer is still returned in stream order
    s.recorded = false;
    if (!will_wait) { return; }
    auto& backend = detail::get_backend();
    if (s.event == nullptr) { s.event = backend.event_create(cudaEventDisableTiming); }
    backend.event_record(s.event, stream_);
    s.recorded = true;
  }

  /// Blocks until buffer `i`'s latest DMA has completed (no-op when none is in flight).
  void wait(std::size_t i)
  {
    slot& s = slots_[i];
    if (!s.in_flight) { return; }
    if (s.recorded) {
      detail::get_backend().event_synchronize(s.event);
    } else {
      detail::get_backend().stream_synchronize(stream_);
    }
    s.in_flight = false;
  }

 private:
  struct slot {
    std::byte* memory{};
    cudaEvent_t event{};
    bool in_flight{};  // a DMA from or to `memory` was enqueued and has not been waited for
    bool recorded{};   // `event` was recorded after that DMA
  };
  std::size_t buffer_bytes_;
  cudaStream_t stream_;
  std::atomic<std::size_t>& returned_in_flight_;
  std::array<slot, 2> slots_{};
};

/**
 * @brief Bounds the staging memory that copies to the device leave in flight on each stream.
 *
 * A staged copy to the device returns before its last DMAs have run, and gives its buffers back to the
 * pinned pool in stream order. Without a bound, back-to-back copies on a stream that lags behind (a long
 * kernel ahead of them, or copies of at most two chunks per thread, which never wait) would each take fresh
 * pinned memory, and the pool would grow with the lag (measured on the host backend: 20 copies of 64 MiB in a
 * row left 640 MiB of pinned memory reserved). So each such copy first waits, on the host, until at most
 * `limit` bytes of earlier copies on the same stream are still in flight (as CUDA's own pageable copies
 * block), and afterwards records an event on the stream, after its buffers were given back: once that event
 * has completed, the pool can reuse them. Only the same stream is waited for, so a copy never depends on
 * another stream's progress.
 */
class stream_throttle {
 public:
  /// A stream as the copies see it: cudaStreamPerThread is each thread's own; stream 0 each device's.
  struct key {
    int device;
    cudaStream_t stream;
    std::thread::id thread;  // only for cudaStreamPerThread
    auto operator<=>(key const&) const = default;
  };

  [[nodiscard]] static key key_of(cudaStream_t stream, int device)
  {
    return {device, stream, stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id{}};
  }

  /// Blocks until at most `limit` bytes recorded for `k` are in flight.
  void wait_until_at_most(key const& k, std::size_t limit)
  {
    for (;;) {
      entry oldest{};
      {
        std::lock_guard const lock{mutex_};
        auto const it = streams_.find(k);
        if (it == streams_.end()) { return; }
        in_flight& f = it->second;
        drop_completed(f);
        if (f.bytes <= limit) {
          if (f.entries.empty()) { streams_.erase(it); }
          return;
        }
        oldest = f.entries.front();
        f.entries.pop_front();
        f.bytes -= oldest.bytes;
      }
      auto& backend = detail::get_backend();
      try {
        backend.event_synchronize(oldest.event);
      } catch (...) {
        backend.event_destroy(oldest.event);
        throw;
      }
      backend.event_destroy(oldest.event);
    }
  }

  /// Records that `bytes` given back so far on `stream` are in flight until the stream's work so far is done.
  void add(key const& k, cudaStream_t stream, std::size_t bytes) noexcept
  {
    if (bytes == 0) { return; }
    auto& backend = detail::get_backend();
    cudaEvent_t event = nullptr;
    try {
      event = backend.event_create(cudaEventDisableTiming);
      backend.event_record(event, stream);
      std::lock_guard const lock{mutex_};
      if (streams_.size() >= prune_above) { prune(); }
      in_flight& f = streams_[k];
      f.entries.push_back({event, bytes});
      f.bytes += bytes;
    } catch (...) {  // no bound for this copy's buffers: the copy itself has succeeded, so go on
      if (event != nullptr) { backend.event_destroy(event); }
    }
  }

 private:
  struct entry {
    cudaEvent_t event;
    std::size_t bytes;
  };
  struct in_flight {
    std::deque<entry> entries;  // oldest first; invariant: bytes == sum of entries' bytes
    std::size_t bytes{};
  };
  /// Streams are rarely destroyed in the middle of a copy, but often after one: forget finished ones.
  static constexpr std::size_t prune_above = 64;

  /// Forgets the entries at the front of `f` that have completed. Caller holds mutex_.
  static void drop_completed(in_flight& f) noexcept
  {
    auto& backend = detail::get_backend();
    while (!f.entries.empty()) {
      bool done = true;  // a failed stream's work never runs: nothing of it is in flight any more
      try {
        done = backend.event_query(f.entries.front().event);
      } catch (...) {  // NOLINT(bugprone-empty-catch): see above
      }
      if (!done) { return; }
      backend.event_destroy(f.entries.front().event);
      f.bytes -= f.entries.front().bytes;
      f.entries.pop_front();
    }
  }

  /// Forgets every stream whose entries have all completed. Caller holds mutex_.
  void prune() noexcept
  {
    for (auto it = streams_.begin(); it != streams_.end();) {
      drop_completed(it->second);
      it = it->second.entries.empty() ? streams_.erase(it) : std::next(it);
    }
  }

  std::mutex mutex_;
  std::map<key, in_flight> streams_;  // guarded by mutex_
};

[[nodiscard]] stream_throttle& throttle()
{
  static auto* const t = new stream_throttle{};  // never destroyed: copies may run from static destructors
  return *t;
}

/// Source -> buffer, then DMA buffer -> device, for each of the lane's chunks; buffer reuse waits for its DMA.
void stage_to_device(staged_copy& copy, std::size_t lane, staging_pair& buffers)
{
  auto& backend = detail::get_backend();
  std::size_t local = 0;
  for (std::size_t c = lane; c < copy.chunks; c += copy.lanes, ++local) {
    if (copy.failed.load(std::memory_order_relaxed)) { return; }
    std::size_t const b = local % 2;
    std::size_t const offset = c * copy.chunk_bytes;
    std::size_t const n = std::min(copy.chunk_bytes, copy.bytes - offset);
    buffers.wait(b);  // the DMA of chunk c - 2 lanes, which read this buffer
    std::byte* const staging = buffers.buffer(b);
    std::memcpy(staging, copy.src + offset, n);
    backend.memcpy_async(copy.dst + offset, staging, n, copy.stream);
    // The lane's last two DMAs are never waited for here: the buffers go back to the pool in stream order.
    buffers.dma_enqueued(b, c + 2 * copy.lanes < copy.chunks);
  }
}

/// DMA device -> buffer for chunk k while the host drains chunk k - 1's buffer into the destination.
void stage_to_host(staged_copy& copy, std::size_t lane, staging_pair& buffers)
{
  auto& backend = detail::get_backend();
  struct pending_chunk {
    std::size_t buffer;
    std::size_t offset;
    std::size_t bytes;
  };
  std::optional<pending_chunk> previous;
  auto const drain = [&](pending_chunk const& p) {
    buffers.wait(p.buffer);
    std::memcpy(copy.dst + p.offset, buffers.buffer(p.buffer), p.bytes);
  };
  std::size_t local = 0;
  for (std::size_t c = lane; c < copy.chunks; c += copy.lanes, ++local) {
    if (copy.failed.load(std::memory_order_relaxed)) { return; }
    std::size_t const b = local % 2;  // drained (chunk c - 2 lanes) in the previous iteration
    std::size_t const offset = c * copy.chunk_bytes;
    std::size_t const n = std::min(copy.chunk_bytes, copy.bytes - offset);
    std::byte* const staging = buffers.buffer(b);
    backend.memcpy_async(staging, copy.src + offset, n, copy.stream);
    buffers.dma_enqueued(b, true);
    if (previous) { drain(*previous); }
    previous = pending_chunk{b, offset, n};
  }
  if (previous) { drain(*previous); }
}

/**
 * @brief Makes `device` the calling thread's current device for one scope, and restores the previous one.
 * Events must be made on the device of the stream they are recorded on, and stream 0 names the current
 * device's legacy stream: every thread of a copy works on its stream's device.
 */
class device_scope {
 public:
  explicit device_scope(int device) : previous_{detail::get_backend().current_device()}
  {
    if (previous_ != device) { detail::get_backend().set_current_device(device); }
    changed_ = previous_ != device;
  }
  ~device_scope()
  {
    if (!changed_) { return; }
    try {
      detail::get_backend().set_current_device(previous_);
    } catch (std::exception const& e) {  // cannot happen for a device that was current a moment ago
      std::fprintf(stderr, "gpumem: staged copy: restoring device %d failed: %s\n", previous_, e.what());
    }
  }
  device_scope(device_scope const&) = delete;
  device_scope& operator=(device_scope const&) = delete;
  device_scope(device_scope&&) = delete;
  device_scope& operator=(device_scope&&) = delete;

 private:
  int previous_;
  bool changed_{false};
};

void run_lane(staged_copy& copy, std::size_t lane)
{
  try {
    device_scope const on_device{copy.device};  // a worker's current device may be another
    staging_pair buffers{std::min(copy.chunk_bytes, copy.bytes), copy.stream, copy.returned_in_flight};
    if (copy.dir == direction::to_device) {
      stage_to_device(copy, lane, buffers);
    } else {
      stage_to_host(copy, lane, buffers);
    }
  } catch (...) {
    copy.failed.store(true, std::memory_order_relaxed);
    throw;
  }
}

void staged(direction dir, void* dst, void const* src, std::size_t bytes, cuda_stream_view stream,
            std::string_view caller)
{
  auto& backend = detail::get_backend();
  transfer_config const config = get_transfer_config();
  if (backend.stream_is_capturing(stream.value())) {
    throw logic_error(std::string{caller} +
                      ": a copy from or to pageable host memory cannot be captured into a graph (its staging "
                      "buffers are reused after the call); use pinned host memory");
  }
  std::size_t const chunks = bytes / config.chunk_bytes + (bytes % config.chunk_bytes != 0 ? 1 : 0);
  // Workers cannot name the caller's per-thread default stream (cudaStreamPerThread is each thread's own).
  bool const parallel = bytes >= config.parallel_threshold && !stream.is_per_thread_default();
  std::size_t const lanes = parallel ? std::min<std::size_t>(config.threads, chunks) : 1;
  staged_copy copy{dir,
                   static_cast<std::byte*>(dst),
                   static_cast<std::byte const*>(src),
                   bytes,
                   config.chunk_bytes,
                   chunks,
                   lanes,
                   stream.value(),
                   backend.stream_device(stream.value())};
  device_scope const on_device{copy.device};  // for the throttle's event
  auto const key = stream_throttle::key_of(stream.value(), copy.device);
  if (dir == direction::to_device) {
    // At most one more copy's worth of staging memory in flight on this stream than this copy's own.
    throttle().wait_until_at_most(key, std::size_t{2} * config.threads * config.chunk_bytes);
  }
  if (lanes == 1) {
    run_lane(copy, 0);
  } else {
    detail::get_copy_workers().run(lanes, [&copy](std::size_t lane) { run_lane(copy, lane); });
  }
  throttle().add(key, copy.stream, copy.returned_in_flight.load(std::memory_order_relaxed));
}

}  // namespace

transfer_config get_transfer_config()
{
  config_store& s = store();
  std::lock_guard const lock{s.mutex};
  // A malformed variable throws here, and again on the next call (nothing is stored).
  if (!s.config) { s.config = detail::transfer_config_from_environment(); }
  return *s.config;
}

void set_transfer_config(transfer_config const& config)
{
  expects(config.chunk_bytes > 0 && config.chunk_bytes % chunk_alignment == 0,
          "chunk_bytes = " + std::to_string(config.chunk_bytes) + " is not a positive multiple of 256");
  expects(config.threads >= 1 && config.threads <= max_copy_threads,
          "threads = " + std::to_string(config.threads) + " is not from 1 to 64");
  config_store& s = store();
  std::lock_guard const lock{s.mutex};
  s.config = config;
}

namespace {

/// Both public copies: one asynchronous copy when the host side is pinned, else staged.
void copy_between(direction dir, void* dst, void const* src, std::size_t bytes, cuda_stream_view stream,
                  std::string_view caller)
{
  if (bytes == 0) { return; }
  auto const null_argument = [&](char const* name) {
    return logic_error(std::string{caller} + ": " + name + " is null (bytes = " + std::to_string(bytes) + ")");
  };
  if (dst == nullptr) { throw null_argument("dst"); }
  if (src == nullptr) { throw null_argument("src"); }
  auto& backend = detail::get_backend();
  if (backend.is_pinned_host(dir == direction::to_device ? src : static_cast<void const*>(dst))) {
    backend.memcpy_async(dst, src, bytes, stream.value());
    return;
  }
  staged(dir, dst, src, bytes, stream, caller);
}

}  // namespace

void copy_to_device(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream)
{
  copy_between(direction::to_device, dst, src, bytes, stream, "gpumem::copy_to_device");
}

void copy_to_host(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream)
{
  copy_between(direction::to_host, dst, src, bytes, stream, "gpumem::copy_to_host");
}

}  // namespace gpumem

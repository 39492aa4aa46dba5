// simulated_memory_resource (simulated_memory_resource.hpp): first-fit address arithmetic over a coalescing
// map of free ranges, with failure injection. No memory is ever touched.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

namespace gpumem::mr {
namespace {

constexpr std::size_t alignment = detail::allocation_alignment;

std::uintptr_t to_address(void const* ptr) noexcept { return reinterpret_cast<std::uintptr_t>(ptr); }
void* to_pointer(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }  // NOLINT

std::size_t validated_capacity(std::size_t capacity, std::uintptr_t base)
{
  if (capacity == 0 || capacity % alignment != 0) {
    throw logic_error("gpumem::mr::simulated_memory_resource: capacity " + std::to_string(capacity) +
                      " must be a positive multiple of " + std::to_string(alignment) + " bytes");
  }
  if (base == 0 || base % alignment != 0) {
    throw logic_error("gpumem::mr::simulated_memory_resource: base address " + format_pointer(to_pointer(base)) +
                      " must be non-zero and a multiple of " + std::to_string(alignment));
  }
  if (base > std::numeric_limits<std::uintptr_t>::max() - capacity) {
    throw logic_error("gpumem::mr::simulated_memory_resource: base address " + format_pointer(to_pointer(base)) +
                      " + capacity " + std::to_string(capacity) + " overflows the address space");
  }
  return capacity;
}

using range_map = std::map<std::uintptr_t, std::size_t>;

/// Inserts an extracted node into `map` as {start, length}: moves a node between or within the maps
/// without allocating, which keeps deallocation (noexcept) free of std::bad_alloc.
void insert_node(range_map& map, range_map::node_type node, std::uintptr_t start, std::size_t length) noexcept
{
  if (node.empty()) { return; }  // cannot happen (extracted from a valid iterator); says so to the compiler
  node.key() = start;
  node.mapped() = length;
  map.insert(std::move(node));
}

/// Checks the invariants at the end of a call, in debug builds (mr/detail/invariant_checks.hpp).
using checked_call = detail::invariant_check_at_exit<simulated_memory_resource>;

}  // namespace

simulated_memory_resource::simulated_memory_resource(std::size_t capacity, std::uintptr_t base)
  : capacity_{validated_capacity(capacity, base)}, base_{base}
{
  free_ranges_.emplace(base_, capacity_);
}

// ---- failure injection --------------------------------------------------------------------------------

void simulated_memory_resource::fail_after(std::size_t n)
{
  detail::lock_guard lock{mutex_};
  fail_after_set_ = true;
  fail_after_n_ = n;
  fail_after_calls_ = 0;
}

void simulated_memory_resource::fail_every(std::size_t k)
{
  if (k == 0) { throw logic_error("gpumem::mr::simulated_memory_resource::fail_every: k must be at least 1"); }
  detail::lock_guard lock{mutex_};
  fail_every_k_ = k;
  fail_every_calls_ = 0;
}

void simulated_memory_resource::fail_randomly(double probability, std::uint64_t seed)
{
  if (!(probability >= 0.0 && probability <= 1.0)) {  // also rejects NaN
    std::ostringstream message;
    message << "gpumem::mr::simulated_memory_resource::fail_randomly: probability " << probability
            << " is not within [0, 1]";
    throw logic_error(message.str());
  }
  detail::lock_guard lock{mutex_};
  fail_probability_ = probability;
  fail_rng_.seed(seed);
}

void simulated_memory_resource::clear_failures() noexcept
{
  detail::lock_guard lock{mutex_};
  fail_after_set_ = false;
  fail_every_k_ = 0;
  fail_probability_ = 0.0;
}

std::string simulated_memory_resource::injected_failure_locked()
{
  // Every rule counts this call, even when an earlier rule already fails it, so that each rule's
  // schedule depends only on the number of calls.
  std::string cause;
  if (fail_after_set_) {
    ++fail_after_calls_;
    if (fail_after_calls_ > fail_after_n_) {
      cause = "injected failure: fail_after(" + std::to_string(fail_after_n_) + "), call " +
              std::to_string(fail_after_calls_) + " since it was set";
    }
  }
  if (fail_every_k_ != 0) {
    ++fail_every_calls_;
    if (fail_every_calls_ % fail_every_k_ == 0 && cause.empty()) {
      cause = "injected failure: fail_every(" + std::to_string(fail_every_k_) + "), call " +
              std::to_string(fail_every_calls_) + " since it was set";
    }
  }
  if (fail_probability_ > 0.0) {
    // The top 53 bits as a double in [0, 1): the same on every platform, unlike std's distributions.
    double const draw = static_cast<double>(fail_rng_() >> 11U) * 0x1.0p-53;
    if (draw < fail_probability_ && cause.empty()) {
      std::ostringstream text;
      text << "injected failure: fail_randomly(" << fail_probability_ << ")";
      cause = text.str();
    }
  }
  return cause;
}

// ---- allocation ---------------------------------------------------------------------------------------

void* simulated_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view /*stream*/)
{
  checked_call const check{*this, invariant_sampler_, "simulated_memory_resource", "allocate"};
  std::size_t const reserved = detail::align_up(bytes, alignment);  // no overflow: checked by allocate()
  detail::lock_guard lock{mutex_};

  std::string cause = injected_failure_locked();
  auto fit = free_ranges_.end();
  if (cause.empty()) {
    // First fit: the lowest-addressed free range that is large enough. O(number of free ranges).
    fit = std::find_if(free_ranges_.begin(), free_ranges_.end(),
                       [reserved](auto const& range) { return range.second >= reserved; });
    if (fit == free_ranges_.end()) { cause = "no free range is large enough"; }
  } else {
    ++injected_failures_;
  }
  if (!cause.empty()) {
    std::size_t const free_bytes = capacity_ - bytes_in_use_;
    throw out_of_memory("out of memory: simulated_memory_resource could not allocate " + format_bytes(bytes) +
                        " on its simulated device (" + format_bytes(free_bytes) + " free of " +
                        format_bytes(capacity_) + " total simulated capacity; largest free range " +
                        format_bytes(largest_free_range_locked()) + "); " + cause);
  }

  std::uintptr_t const address = fit->first;
  if (fit->second == reserved) {
    // The range is used up: its node becomes the live allocation's (no allocation).
    insert_node(live_, free_ranges_.extract(fit), address, bytes);
  } else {
    live_.emplace(address, bytes);  // may throw std::bad_alloc: nothing has changed yet
    std::size_t const remaining = fit->second - reserved;
    insert_node(free_ranges_, free_ranges_.extract(fit), address + reserved, remaining);
  }
  bytes_in_use_ += reserved;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  ++total_allocations_;
  return to_pointer(address);
}

void simulated_memory_resource::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view /*stream*/) noexcept
{
  checked_call const check{*this, invariant_sampler_, "simulated_memory_resource", "deallocate"};
  std::uintptr_t const address = to_address(ptr);
  detail::lock_guard lock{mutex_};
  auto const live = live_.find(address);
  if (live == live_.end() || live->second != bytes) {
    ++invalid_deallocations_;
    return;
  }
  std::size_t const reserved = detail::align_up(bytes, alignment);
  range_map::node_type node = live_.extract(live);
  bytes_in_use_ -= reserved;

  // Coalesce with the free neighbours. Every path reuses existing nodes, so nothing allocates here.
  auto next = free_ranges_.lower_bound(address);
  bool const merges_next = next != free_ranges_.end() && address + reserved == next->first;
  auto prev = next == free_ranges_.begin() ? free_ranges_.end() : std::prev(next);
  bool const merges_prev = prev != free_ranges_.end() && prev->first + prev->second == address;

  if (merges_prev) {
    prev->second += reserved;
    if (merges_next) {
      prev->second += next->second;
      free_ranges_.erase(next);
    }
  } else if (merges_next) {
    std::size_t const length = reserved + next->second;
    free_ranges_.erase(next);
    insert_node(free_ranges_, std::move(node), address, length);
  } else {
    insert_node(free_ranges_, std::move(node), address, reserved);
  }
}

// ---- queries ------------------------------------------------------------------------------------------

std::size_t simulated_memory_resource::bytes_in_use() const noexcept
{
  detail::lock_guard lock{mutex_};
  return bytes_in_use_;
}

std::size_t simulated_memory_resource::peak_bytes_in_use() const noexcept
{
  detail::lock_guard lock{mutex_};
  return peak_bytes_in_use_;
}

std::size_t simulated_memory_resource::allocation_count() const noexcept
{
  detail::lock_guard lock{mutex_};
  return live_.size();
}

std::size_t simulated_memory_resource::total_allocations() const noexcept
{
  detail::lock_guard lock{mutex_};
  return total_allocations_;
}

std::size_t simulated_memory_resource::injected_failures() const noexcept
{
  detail::lock_guard lock{mutex_};
  return injected_failures_;
}

std::size_t simulated_memory_resource::invalid_deallocations() const noexcept
{
  detail::lock_guard lock{mutex_};
  return invalid_deallocations_;
}

std::size_t simulated_memory_resource::free_range_count() const noexcept
{
  detail::lock_guard lock{mutex_};
  return free_ranges_.size();
}

std::size_t simulated_memory_resource::largest_free_range() const noexcept
{
  detail::lock_guard lock{mutex_};
  return largest_free_range_locked();
}

std::size_t simulated_memory_resource::largest_free_range_locked() const noexcept
{
  std::size_t largest = 0;
  for (auto const& [start, length] : free_ranges_) { largest = std::max(largest, length); }
  return largest;
}

bool simulated_memory_resource::owns(void const* ptr) const noexcept
{
  std::uintptr_t const address = to_address(ptr);
  detail::lock_guard lock{mutex_};
  auto const after = live_.upper_bound(address);
  if (after == live_.begin()) { return false; }
  auto const candidate = std::prev(after);
  return address < candidate->first + detail::align_up(candidate->second, alignment);
}

void simulated_memory_resource::check_invariants() const
{
  detail::lock_guard lock{mutex_};
  auto violation = [](std::string const& what) {
    throw logic_error("gpumem::mr::simulated_memory_resource::check_invariants: " + what);
  };
  auto describe = [](char const* kind, std::uintptr_t start, std::size_t length) {
    return std::string{kind} + " [" + format_pointer(to_pointer(start)) + ", +" + std::to_string(length) + ")";
  };

  std::size_t free_sum = 0;
  std::size_t live_sum = 0;
  std::uintptr_t previous_end = base_;
  bool previous_was_free = false;
  auto free_it = free_ranges_.begin();
  auto live_it = live_.begin();
  // Merge-walk both maps in address order: together they must tile [base, base + capacity).
  while (free_it != free_ranges_.end() || live_it != live_.end()) {
    bool const take_free =
      live_it == live_.end() || (free_it != free_ranges_.end() && free_it->first < live_it->first);
    std::uintptr_t const start = take_free ? free_it->first : live_it->first;
    std::size_t const length = take_free ? free_it->second : detail::align_up(live_it->second, alignment);
    char const* const kind = take_free ? "free range" : "live allocation";
    if (length == 0 || (take_free && length % alignment != 0)) {
      violation(describe(kind, start, length) + " has a bad length");
    }
    if (start % alignment != 0) { violation(describe(kind, start, length) + " is not 256-byte aligned"); }
    if (start < base_ || start > base_ + capacity_ || length > base_ + capacity_ - start) {
      violation(describe(kind, start, length) + " lies outside the simulated address space");
    }
    if (start < previous_end) { violation(describe(kind, start, length) + " overlaps its predecessor"); }
    if (start > previous_end) {
      violation(describe(kind, start, length) + " leaves a gap after its predecessor: addresses were lost");
    }
    if (take_free && previous_was_free && start == previous_end) {
      violation(describe(kind, start, length) + " touches the previous free range: not coalesced");
    }
    previous_end = start + length;
    previous_was_free = take_free;
    if (take_free) {
      free_sum += length;
      ++free_it;
    } else {
      live_sum += length;
      ++live_it;
    }
  }
  if (live_sum != bytes_in_use_) {
    violation("live allocations reserve " + std::to_string(live_sum) + " bytes but bytes_in_use is " +
              std::to_string(bytes_in_use_));
  }
  if (free_sum + live_sum != capacity_) {
    violation("free (" + std::to_string(free_sum) + ") + live (" + std::to_string(live_sum) +
              ") bytes != capacity (" + std::to_string(capacity_) + ")");
  }
  if (peak_bytes_in_use_ < bytes_in_use_) { violation("peak_bytes_in_use is below bytes_in_use"); }
}

}  // namespace gpumem::mr

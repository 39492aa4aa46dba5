// tracking_resource_adaptor (tracking_resource_adaptor.hpp): a map of outstanding allocations under a mutex,
// with optional call stacks from backtrace(), symbolised when asked for; deallocations it cannot match are
// forwarded as RMM forwards them, except under checked_deallocate().

#include <gpumem/debug_log.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#if __has_include(<execinfo.h>)
#include <execinfo.h>
#define GPUMEM_HAS_EXECINFO 1
#endif

namespace gpumem::mr {
namespace {

/// The calling stack's return addresses, without this function's and the adaptor's own frames.
std::vector<void*> capture_frames()
{
#ifdef GPUMEM_HAS_EXECINFO
  constexpr int skipped = 2;  // capture_frames, do_allocate
  std::array<void*, 64> frames{};
  int const depth = ::backtrace(frames.data(), static_cast<int>(frames.size()));
  if (depth <= skipped) { return {}; }
  return {frames.begin() + skipped, frames.begin() + depth};
#else
  return {};
#endif
}

/// `frames` symbolised, one frame a line ("    #N symbol").
std::string symbolise(std::vector<void*> const& frames)
{
#ifdef GPUMEM_HAS_EXECINFO
  if (frames.empty()) { return {}; }
  char** const symbols = ::backtrace_symbols(frames.data(), static_cast<int>(frames.size()));
  if (symbols == nullptr) { return {}; }
  std::string stack;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    stack += "    #" + std::to_string(i) + " " + symbols[i] + "\n";
  }
  std::free(symbols);  // NOLINT(cppcoreguidelines-no-malloc): backtrace_symbols' contract
  return stack;
#else
  (void)frames;
  return {};
#endif
}

}  // namespace

tracking_resource_adaptor::tracking_resource_adaptor(device_memory_resource* upstream, bool capture_stacks)
  : resource_adaptor_base{upstream}, capture_stacks_{capture_stacks}
{
}

tracking_resource_adaptor::~tracking_resource_adaptor()
{
  try {
    if (outstanding_count() == 0) { return; }
    std::string const text = "gpumem: tracking_resource_adaptor destroyed with outstanding allocations (leaks): " +
                             report();
    std::fputs(text.c_str(), stderr);
  } catch (...) {  // a destructor must not throw; the report is best effort
  }
}

std::size_t tracking_resource_adaptor::allocated_bytes() const noexcept
{
  gpumem::detail::lock_guard const lock{mutex_};
  return allocated_bytes_;
}

std::map<void*, tracking_resource_adaptor::allocation_info> tracking_resource_adaptor::outstanding_allocations() const
{
  std::map<void*, record> snapshot;
  {
    gpumem::detail::lock_guard const lock{mutex_};
    snapshot = outstanding_;
  }
  std::map<void*, allocation_info> out;  // symbolised outside the lock: it is slow
  for (auto& [ptr, r] : snapshot) { out.emplace(ptr, allocation_info{r.bytes, r.stream, symbolise(r.frames)}); }
  return out;
}

std::size_t tracking_resource_adaptor::outstanding_count() const noexcept
{
  gpumem::detail::lock_guard const lock{mutex_};
  return outstanding_.size();
}

std::size_t tracking_resource_adaptor::invalid_deallocations() const noexcept
{
  gpumem::detail::lock_guard const lock{mutex_};
  return invalid_deallocations_;
}

std::size_t tracking_resource_adaptor::untracked_deallocations() const noexcept
{
  gpumem::detail::lock_guard const lock{mutex_};
  return untracked_deallocations_;
}

std::string tracking_resource_adaptor::report() const
{
  std::map<void*, allocation_info> const snapshot = outstanding_allocations();
  if (snapshot.empty()) { return "no outstanding allocations\n"; }
  std::size_t total = 0;
  for (auto const& [ptr, info] : snapshot) { total += info.bytes; }
  std::ostringstream text;
  text << snapshot.size() << " outstanding allocation" << (snapshot.size() == 1 ? "" : "s") << ", "
       << format_bytes(total) << " in all:\n";
  for (auto const& [ptr, info] : snapshot) {
    text << "  " << format_pointer(ptr) << ": " << info.bytes << " bytes on stream "
         << format_pointer(info.stream.value()) << "\n"
         << info.stack;
  }
  return text.str();
}

void* tracking_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  record info{bytes, stream, capture_stacks_ ? capture_frames() : std::vector<void*>{}};
  void* const ptr = upstream_resource()->allocate(bytes, stream);
  try {
    gpumem::detail::lock_guard const lock{mutex_};
    outstanding_.insert_or_assign(ptr, std::move(info));
    allocated_bytes_ += bytes;
  } catch (...) {
    upstream_resource()->deallocate(ptr, bytes, stream);
    throw;
  }
  return ptr;
}

void tracking_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  bool const checked = detail::deallocation_is_checked();
  enum class outcome { tracked, wrong_size, untracked } result = outcome::tracked;
  std::size_t known_bytes = bytes;
  bool first = false;
  {
    gpumem::detail::lock_guard const lock{mutex_};
    auto const it = outstanding_.find(ptr);
    if (it == outstanding_.end()) {
      result = outcome::untracked;
    } else if (it->second.bytes != bytes) {
      result = outcome::wrong_size;
      known_bytes = it->second.bytes;
    }
    if (result == outcome::tracked || (result == outcome::wrong_size && !checked)) {
      allocated_bytes_ -= known_bytes;
      outstanding_.erase(it);  // before the upstream may hand the same address to another thread
    }
    if (result == outcome::wrong_size || (result == outcome::untracked && checked)) {
      first = ++invalid_deallocations_ == 1;
    } else if (result == outcome::untracked) {
      first = ++untracked_deallocations_ == 1;
    }
  }
  try {
    std::string const where = format_pointer(ptr) + ", " + std::to_string(bytes) + " bytes";
    if (result == outcome::wrong_size) {
      // Logged once (further ones are only counted); checked_deallocate() throws every one.
      detail::report_deallocation_misuse("tracking_resource_adaptor: invalid deallocation of an allocation of " +
                                           std::to_string(known_bytes) + " bytes with the wrong size: " + where +
                                           (checked ? "; not forwarded" : "; forwarded with its allocated size"),
                                         first);
    } else if (result == outcome::untracked && checked) {
      detail::report_deallocation_misuse("tracking_resource_adaptor: invalid deallocation of a pointer it did not "
                                           "hand out (or already took back): " + where + "; not forwarded",
                                         first);
    } else if (result == outcome::untracked && first) {
      detail::log(log_level::warn, "tracking_resource_adaptor: deallocation of a pointer it did not hand out (or "
                                   "already took back): " + where + "; forwarded to the upstream");
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): deallocate must not throw; the report is best effort
  }
  if (!checked || result == outcome::tracked) { upstream_resource()->deallocate(ptr, known_bytes, stream); }
}

}  // namespace gpumem::mr

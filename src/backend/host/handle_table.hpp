// The host backend's handles for streams and events. A handle is a number from a range of its own,
// never reused: a destroyed handle stays recognisable for the life of the process. CUDA gives no such
// promise (a destroyed stream's handle is often returned again by the next cudaStreamCreate), and a call
// on a destroyed handle is undefined behaviour there, typically a crash. The host backend makes it a loud,
// certain failure instead (stop_on_destroyed_handle), so that code which keeps a stream or event handle
// past its owner's lifetime fails the CPU test suite, not a user's program on a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>

namespace gpumem::detail::host {

/**
 * @brief Prints what was done with a destroyed handle, and a backtrace, then aborts the process.
 * @param kind "stream" or "event"; @param operation the backend call, e.g. "event_record".
 */
[[noreturn]] void stop_on_destroyed_handle(char const* kind, void const* handle, char const* operation) noexcept;

/// What a handle names.
enum class handle_state { live, destroyed, unknown };

/**
 * @brief Live objects by handle; handles are tag * 2^44 + 256 * n for n = 1, 2, ... in creation order.
 * Thread-safety: none; the backend locks around every call.
 */
template <class Handle, class Object>
class handle_table {
 public:
  /// @param tag tells this table's handles from other tables' (and from real pointers, in a message).
  explicit constexpr handle_table(std::uintptr_t tag) noexcept : base_{tag << 44} {}

  /** @return a new handle for `object`, never handed out before. */
  Handle add(std::shared_ptr<Object> object)
  {
    next_ += step;
    auto const handle = reinterpret_cast<Handle>(base_ + next_);  // NOLINT(performance-no-int-to-ptr)
    live_.emplace(handle, std::move(object));
    return handle;
  }

  /** @return the object of a live handle (null otherwise), and what the handle names. */
  [[nodiscard]] std::pair<std::shared_ptr<Object>, handle_state> find(Handle handle) const
  {
    if (auto const found = live_.find(handle); found != live_.end()) { return {found->second, handle_state::live}; }
    return {nullptr, was_issued(handle) ? handle_state::destroyed : handle_state::unknown};
  }

  /** @return the object of a live handle, now removed from the table (null otherwise), and its state. */
  std::pair<std::shared_ptr<Object>, handle_state> remove(Handle handle)
  {
    auto found = find(handle);
    if (found.second == handle_state::live) { live_.erase(handle); }
    return found;
  }

  /** @brief Calls visit(std::shared_ptr<Object> const&) for every live object. */
  template <class Visitor>
  void for_each(Visitor&& visit) const
  {
    for (auto const& [handle, object] : live_) { visit(object); }
  }

 private:
  static constexpr std::uintptr_t step = 256;

  [[nodiscard]] bool was_issued(Handle handle) const noexcept
  {
    auto const value = reinterpret_cast<std::uintptr_t>(handle);
    return value > base_ && value - base_ <= next_ && (value - base_) % step == 0;
  }

  std::uintptr_t base_;
  std::uintptr_t next_{};  // the offset of the latest handle
  std::unordered_map<Handle, std::shared_ptr<Object>> live_;
};

}  // namespace gpumem::detail::host

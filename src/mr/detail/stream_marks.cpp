// The streams of the pieces of free ranges (stream_marks.hpp has the contract).
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/stream_marks.hpp>

#include <string>
#include <utility>

namespace gpumem::detail {
namespace {

/// Moves the mark at `it` to `start` with `size`, in its node (no allocation). @pre the order of the marks
/// stays the same.
template <class Map>
void move_mark(Map& marks, typename Map::iterator it, std::uintptr_t start, std::size_t size) noexcept
{
  auto const hint = std::next(it);
  auto node = marks.extract(it);
  if (node.empty()) [[unlikely]] { return; }  // `it` is a mark: never
  node.key() = start;
  node.mapped().size = size;
  marks.insert(hint, std::move(node));
}

}  // namespace

stream_marks::spare_nodes::~spare_nodes()
{
  while (first_ != nullptr) { ::operator delete(std::exchange(first_, first_->next)); }
}

void* stream_marks::spare_nodes::take(std::size_t bytes)
{
  if (first_ != nullptr && bytes == bytes_) { return std::exchange(first_, first_->next); }
  return ::operator new(bytes);
}

void stream_marks::spare_nodes::give(void* node, std::size_t bytes) noexcept
{
  if (bytes < sizeof(spare) || (first_ != nullptr && bytes != bytes_)) {
    ::operator delete(node);
    return;
  }
  bytes_ = bytes;
  first_ = ::new (node) spare{first_};
}

stream_marks::stream_marks() : spares_{std::make_unique<spare_nodes>()}, marks_{node_allocator<map::value_type>{spares_.get()}} {}
stream_marks::~stream_marks() = default;
stream_marks::stream_marks(stream_marks&&) noexcept = default;
stream_marks& stream_marks::operator=(stream_marks&& other) noexcept
{
  marks_ = std::move(other.marks_);    // our nodes go to our spares first; then the map takes other's allocator
  spares_ = std::move(other.spares_);  // and its spares
  return *this;
}

void stream_marks::add(std::uintptr_t start, std::size_t size, std::uint64_t streams)
{
  auto next = marks_.lower_bound(start);
  auto const previous = next == marks_.begin() ? marks_.end() : std::prev(next);
  bool const merge_previous = previous != marks_.end() && previous->first + previous->second.size == start &&
                              previous->second.streams == streams;
  bool const merge_next = next != marks_.end() && next->first == start + size && next->second.streams == streams;
  if (merge_previous && merge_next) {
    previous->second.size += size + next->second.size;
    marks_.erase(next);
  } else if (merge_previous) {
    previous->second.size += size;
  } else if (merge_next) {
    move_mark(marks_, next, start, size + next->second.size);
  } else {
    marks_.emplace_hint(next, start, mark{size, streams});
  }
}

std::uint64_t stream_marks::remove(std::uintptr_t begin, std::uintptr_t end)
{
  std::uint64_t streams = 0;
  auto it = marks_.lower_bound(begin);
  if (it != marks_.begin()) {
    auto const previous = std::prev(it);
    std::uintptr_t const previous_end = previous->first + previous->second.size;
    if (previous_end > begin) {  // a mark across `begin`
      streams |= previous->second.streams;
      if (previous_end > end) {  // and across `end`: its part after `end` becomes a mark of its own first
        marks_.emplace_hint(it, end, mark{previous_end - end, previous->second.streams});
        previous->second.size = begin - previous->first;
        return streams;
      }
      previous->second.size = begin - previous->first;
    }
  }
  while (it != marks_.end() && it->first < end) {
    streams |= it->second.streams;
    std::uintptr_t const mark_end = it->first + it->second.size;
    if (mark_end <= end) {
      it = marks_.erase(it);
      continue;
    }
    move_mark(marks_, it, end, mark_end - end);  // a mark across `end`: its part after `end` stays
    break;
  }
  return streams;
}

void stream_marks::clear(std::uint64_t mask) noexcept
{
  for (auto it = marks_.begin(); it != marks_.end();) {
    it->second.streams &= ~mask;
    it = it->second.streams == 0 ? marks_.erase(it) : std::next(it);
  }
}

void stream_marks::check() const
{
  std::uintptr_t previous_end = 0;
  for (auto const& [start, m] : marks_) {
    if (m.size == 0 || m.streams == 0) {
      throw logic_error("stream_marks invariant violated: the mark at " + std::to_string(start) + " is empty or has no stream");
    }
    if (start < previous_end) {
      throw logic_error("stream_marks invariant violated: the mark at " + std::to_string(start) + " overlaps the previous one");
    }
    previous_end = start + m.size;
  }
}

}  // namespace gpumem::detail

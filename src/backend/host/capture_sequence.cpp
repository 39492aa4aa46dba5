// capture_sequence: see capture_sequence.hpp.
#include "capture_sequence.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace gpumem::detail::host {

std::shared_ptr<capture_sequence> capture_sequence::make(std::shared_ptr<stream_queue> const& origin,
                                                         capture_mode mode)
{
  std::shared_ptr<capture_sequence> capture{new capture_sequence{origin, mode}};
  origin->set_capture(capture);
  return capture;
}

capture_sequence::capture_sequence(std::shared_ptr<stream_queue> const& origin, capture_mode mode)
  : mode_{mode}, thread_{std::this_thread::get_id()}, origin_{origin}, origin_raw_{origin.get()}
{
  members_.emplace(origin.get(), member{origin, {}, origin->device(), origin->blocking()});
}

bool capture_sequence::over_locked() const { return ended_ || origin_.expired(); }

bool capture_sequence::over()
{
  gpumem::detail::lock_guard lock{mutex_};
  return over_locked();
}

bool capture_sequence::invalidated()
{
  gpumem::detail::lock_guard lock{mutex_};
  return !over_locked() && !invalidated_by_.empty();
}

std::string capture_sequence::invalidated_by()
{
  gpumem::detail::lock_guard lock{mutex_};
  return invalidated_by_;
}

void capture_sequence::invalidate(std::string const& reason)
{
  gpumem::detail::lock_guard lock{mutex_};
  if (!over_locked() && invalidated_by_.empty()) { invalidated_by_ = reason; }
}

capture_sequence::result capture_sequence::capture(stream_queue const& stream, stream_queue::operation work)
{
  gpumem::detail::lock_guard lock{mutex_};
  if (over_locked()) { return result::over; }
  if (!invalidated_by_.empty()) { return result::invalidated; }
  member& m = members_.at(&stream);
  nodes_.push_back(node{std::move(work), std::exchange(m.next, node_set{nodes_.size()})});
  return result::done;
}

capture_sequence::result capture_sequence::position(stream_queue const& stream, node_set& out)
{
  gpumem::detail::lock_guard lock{mutex_};
  if (over_locked()) { return result::over; }
  if (!invalidated_by_.empty()) { return result::invalidated; }
  out = members_.at(&stream).next;
  return result::done;
}

capture_sequence::result capture_sequence::join(std::shared_ptr<stream_queue> const& stream, node_set const& after)
{
  {
    gpumem::detail::lock_guard lock{mutex_};
    if (over_locked()) { return result::over; }
    if (!invalidated_by_.empty()) { return result::invalidated; }
    auto const found = members_.find(stream.get());
    if (found != members_.end() && !found->second.stream.expired()) {
      node_set merged;
      std::set_union(found->second.next.begin(), found->second.next.end(), after.begin(), after.end(),
                     std::back_inserter(merged));
      found->second.next = std::move(merged);
      return result::done;
    }
    members_.insert_or_assign(stream.get(), member{stream, after, stream->device(), stream->blocking()});
  }
  stream->set_capture(shared_from_this());
  return result::done;
}

bool capture_sequence::involves(int device, bool blocking_only)
{
  gpumem::detail::lock_guard lock{mutex_};
  if (over_locked()) { return false; }
  return std::any_of(members_.begin(), members_.end(), [&](auto const& entry) {
    member const& m = entry.second;
    return !m.stream.expired() && m.device == device && (m.blocking || !blocking_only);
  });
}

bool capture_sequence::all_lead_to_origin() const
{
  // Mark the origin's position, then every dependency of a marked node. Dependencies have smaller indices,
  // so one pass from the last node down marks every node that leads to the origin's position.
  std::vector<bool> leads(nodes_.size(), false);
  for (std::size_t const i : members_.at(origin_raw_).next) { leads[i] = true; }
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    if (leads[i]) {
      for (std::size_t const d : nodes_[i].dependencies) { leads[d] = true; }
    }
  }
  return std::all_of(leads.begin(), leads.end(), [](bool b) { return b; });
}

capture_sequence::outcome capture_sequence::end()
{
  outcome ended;
  std::vector<std::shared_ptr<stream_queue>> leaving;
  {
    gpumem::detail::lock_guard lock{mutex_};
    ended.joined = all_lead_to_origin();
    ended.invalidated_by = invalidated_by_;
    ended.nodes = std::move(nodes_);
    ended_ = true;
    for (auto const& [key, m] : members_) {
      if (auto stream = m.stream.lock()) { leaving.push_back(std::move(stream)); }
    }
    members_.clear();
  }
  for (auto const& stream : leaving) { stream->leave_capture(this); }
  return ended;
}

}  // namespace gpumem::detail::host

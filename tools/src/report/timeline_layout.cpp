// The allocation timeline's layout (allocation_timeline.hpp): blocks stacked in allocation order, as PyTorch's
// memory_viz stacks active memory. Two passes over the events: the first pairs each alloc with its free and
// picks the blocks to draw (the largest by size × lifetime); the second walks the events keeping live bytes
// and, for the drawn blocks still live, their offsets (a free lowers every younger drawn block by its size).
#include <gpumem/report/allocation_timeline.hpp>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace gpumem {
namespace {

constexpr std::size_t none = static_cast<std::size_t>(-1);

/** @brief Every block: its alloc and free event (none when never freed). */
struct pairing {
  std::vector<std::size_t> alloc_of_event;  ///< for a free event: the alloc it frees (none for an alloc)
  std::vector<std::size_t> free_of_alloc;   ///< for an alloc event: the event that frees it, or none
  std::vector<std::size_t> implicit_free;   ///< for an alloc event: the older alloc it replaces, or none
};

pairing pair_events(std::vector<timeline_event> const& events)
{
  pairing p{std::vector<std::size_t>(events.size(), none), std::vector<std::size_t>(events.size(), none),
            std::vector<std::size_t>(events.size(), none)};
  std::unordered_map<std::uint64_t, std::size_t> live;
  for (std::size_t i = 0; i < events.size(); ++i) {
    timeline_event const& e = events[i];
    auto const it = live.find(e.address);
    if (e.what == timeline_event::kind::alloc) {
      if (it != live.end()) {
        p.implicit_free[i] = it->second;
        p.free_of_alloc[it->second] = i;
      }
      live[e.address] = i;
    } else if (it != live.end()) {
      p.alloc_of_event[i] = it->second;
      p.free_of_alloc[it->second] = i;
      live.erase(it);
    }
  }
  return p;
}

std::int64_t site_of(allocation_timeline const& t, timeline_event const& e)
{
  return e.stack >= 0 ? t.stacks[static_cast<std::size_t>(e.stack)].site : -1;
}

}  // namespace

timeline_layout layout_allocation_timeline(allocation_timeline const& timeline, std::size_t max_blocks)
{
  std::vector<timeline_event> const& events = timeline.events;
  std::size_t const n = events.size();
  pairing const p = pair_events(events);

  // The blocks to draw: the largest size × lifetime (in events), the earlier first on ties.
  std::vector<std::size_t> allocs;
  for (std::size_t i = 0; i < n; ++i) {
    if (events[i].what == timeline_event::kind::alloc) { allocs.push_back(i); }
  }
  auto const end_of = [&](std::size_t a) { return p.free_of_alloc[a] == none ? n : p.free_of_alloc[a]; };
  auto const weight = [&](std::size_t a) {
    return static_cast<long double>(events[a].size) * static_cast<long double>(end_of(a) - a);
  };
  std::vector<std::size_t> chosen = allocs;
  if (chosen.size() > max_blocks) {
    std::stable_sort(chosen.begin(), chosen.end(), [&](std::size_t a, std::size_t b) { return weight(a) > weight(b); });
    chosen.resize(max_blocks);
    std::sort(chosen.begin(), chosen.end());
  }

  timeline_layout out;
  out.events = n;
  out.blocks_total = allocs.size();
  out.live_bytes.reserve(n);
  std::vector<std::size_t> block_of_alloc(n, none);
  for (std::size_t a : chosen) {
    block_of_alloc[a] = out.blocks.size();
    out.blocks.push_back({.alloc_event = a, .begin = a, .end = end_of(a), .freed = p.free_of_alloc[a] != none,
                          .size = events[a].size, .offsets = {}});
  }

  std::map<std::size_t, std::size_t> drawn_live;  // alloc event (its age) -> block index, for drawn live blocks
  std::map<std::int64_t, std::pair<std::size_t, std::size_t>> sites;  // site -> (live bytes, index in out.sites)
  std::size_t live = 0;
  auto const release = [&](std::size_t alloc, std::size_t x) {
    std::size_t const size = events[alloc].size;
    live -= size;
    sites[site_of(timeline, events[alloc])].first -= size;
    drawn_live.erase(alloc);
    for (auto it = drawn_live.upper_bound(alloc); it != drawn_live.end(); ++it) {
      timeline_block& b = out.blocks[it->second];
      std::size_t const lowered = b.offsets.back().second - size;
      if (b.offsets.back().first == x) {
        b.offsets.back().second = lowered;
      } else {
        b.offsets.emplace_back(x, lowered);
      }
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    timeline_event const& e = events[i];
    if (e.what == timeline_event::kind::free) {
      if (p.alloc_of_event[i] != none) { release(p.alloc_of_event[i], i); }
    } else {
      if (p.implicit_free[i] != none) { release(p.implicit_free[i], i); }
      std::int64_t const site = site_of(timeline, e);
      auto [it, added] = sites.try_emplace(site, 0, out.sites.size());
      if (added) { out.sites.push_back({.site = site, .allocations = 0, .peak_bytes = 0}); }
      timeline_site_summary& summary = out.sites[it->second.second];
      ++summary.allocations;
      it->second.first += e.size;
      summary.peak_bytes = std::max(summary.peak_bytes, it->second.first);
      if (block_of_alloc[i] != none) {
        out.blocks[block_of_alloc[i]].offsets.emplace_back(i, live);
        drawn_live.emplace(i, block_of_alloc[i]);
      }
      live += e.size;
      out.peak_bytes = std::max(out.peak_bytes, live);
    }
    out.live_bytes.push_back(live);
  }
  std::sort(out.sites.begin(), out.sites.end(), [](timeline_site_summary const& a, timeline_site_summary const& b) {
    if (a.peak_bytes != b.peak_bytes) { return a.peak_bytes > b.peak_bytes; }
    if (a.allocations != b.allocations) { return a.allocations > b.allocations; }
    return a.site < b.site;
  });
  return out;
}

}  // namespace gpumem

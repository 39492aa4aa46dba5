// before_stream_destroy (before_stream_destroy.hpp): the streams that announced their destruction, and
// the process-wide list of resources told about a stream before it goes.
#include <gpumem/before_stream_destroy.hpp>

#include <gpumem/detail/thread_annotations.hpp>

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace gpumem::detail {
namespace {

// Two locks, never nested: a listener takes cache and resource locks, and those may be held by a thread
// that asks stream_outlives_calls().
struct stream_registry {
  mutex listeners_mutex;
  std::vector<stream_destroy_listener*> listeners GPUMEM_GUARDED_BY(listeners_mutex);
  mutex announced_mutex;
  std::unordered_set<cudaStream_t> announced GPUMEM_GUARDED_BY(announced_mutex);
};

stream_registry& registry()
{
  static stream_registry* const instance = new stream_registry;  // never destroyed: streams may die at exit
  return *instance;
}

}  // namespace

void add_stream_destroy_listener(stream_destroy_listener* listener)
{
  stream_registry& r = registry();
  lock_guard lock{r.listeners_mutex};
  r.listeners.push_back(listener);
}

void remove_stream_destroy_listener(stream_destroy_listener* listener) noexcept
{
  stream_registry& r = registry();
  lock_guard lock{r.listeners_mutex};
  std::erase(r.listeners, listener);
}

void announce_stream(cudaStream_t stream)
{
  stream_registry& r = registry();
  lock_guard lock{r.announced_mutex};
  r.announced.insert(stream);
}

bool stream_outlives_calls(cuda_stream_view stream) noexcept
{
  if (stream.is_default() || stream.is_per_thread_default()) { return true; }
  stream_registry& r = registry();
  lock_guard lock{r.announced_mutex};
  return r.announced.contains(stream.value());
}

}  // namespace gpumem::detail

namespace gpumem::mr {

void before_stream_destroy(cuda_stream_view stream) noexcept
{
  if (stream.is_default() || stream.is_per_thread_default()) { return; }
  detail::stream_registry& r = detail::registry();
  {
    // First, so that no resource starts deferring work on the stream while the listeners forget it.
    detail::lock_guard lock{r.announced_mutex};
    r.announced.erase(stream.value());
  }
  detail::lock_guard lock{r.listeners_mutex};
  for (detail::stream_destroy_listener* listener : r.listeners) { listener->stream_destroying(stream.value()); }
}

}  // namespace gpumem::mr

// before_stream_destroy (mr/before_stream_destroy.hpp): the process-wide list of resources that cache
// blocks per stream, told about a stream before it goes.
#include <gpumem/mr/before_stream_destroy.hpp>

#include <algorithm>
#include <mutex>
#include <vector>

namespace gpumem::detail {
namespace {

struct listener_list {
  std::mutex mutex;
  std::vector<stream_destroy_listener*> listeners;  // GUARDED_BY(mutex)
};

listener_list& listeners()
{
  static listener_list* const list = new listener_list;  // never destroyed: streams may die at exit
  return *list;
}

}  // namespace

void add_stream_destroy_listener(stream_destroy_listener* listener)
{
  listener_list& list = listeners();
  std::lock_guard lock{list.mutex};
  list.listeners.push_back(listener);
}

void remove_stream_destroy_listener(stream_destroy_listener* listener) noexcept
{
  listener_list& list = listeners();
  std::lock_guard lock{list.mutex};
  std::erase(list.listeners, listener);
}

}  // namespace gpumem::detail

namespace gpumem::mr {

void before_stream_destroy(cuda_stream_view stream) noexcept
{
  if (stream.is_default() || stream.is_per_thread_default()) { return; }
  detail::listener_list& list = detail::listeners();
  std::lock_guard lock{list.mutex};
  for (detail::stream_destroy_listener* listener : list.listeners) { listener->stream_destroying(stream.value()); }
}

}  // namespace gpumem::mr

// stop_on_destroyed_handle (handle_table.hpp): the host backend's answer to a call on a destroyed stream or
// event, which CUDA leaves undefined.
#include "handle_table.hpp"

#include <execinfo.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace gpumem::detail::host {

void stop_on_destroyed_handle(char const* kind, void const* handle, char const* operation) noexcept
{
  std::fprintf(stderr,
               "gpumem host backend: %s on %s %p, which was destroyed. CUDA's behaviour is undefined for a "
               "destroyed %s (on a GPU, typically a crash); the host backend stops here. Backtrace:\n",
               operation, kind, handle, kind);
  std::fflush(stderr);
  void* frames[64];
  int const depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  std::abort();
}

}  // namespace gpumem::detail::host

// invariant_checks (mr/detail/invariant_checks.hpp): running a resource's check_invariants() after a call,
// and stopping the program when it finds a broken invariant.
#include <gpumem/mr/detail/invariant_checks.hpp>

#include <gpumem/error.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace gpumem::detail {
namespace {
constinit thread_local std::uint64_t checks_run = 0;
}  // namespace

void run_invariant_check(std::string_view resource, std::string_view call, void (*check)(void const*),
                         void const* resource_ptr) noexcept
{
  ++checks_run;
  try {
    check(resource_ptr);
  } catch (logic_error const& e) {
    std::fprintf(stderr, "gpumem: %.*s::%.*s broke an invariant: %s\n", static_cast<int>(resource.size()),
                 resource.data(), static_cast<int>(call.size()), call.data(), e.what());
    std::fflush(stderr);
    std::abort();
  } catch (...) {  // NOLINT(bugprone-empty-catch): no memory to list the blocks; the next check will tell
  }
}

std::uint64_t invariant_checks_on_this_thread() noexcept { return checks_run; }

}  // namespace gpumem::detail

// statistics_resource_adaptor (statistics_resource_adaptor.hpp): a stack of counters under one mutex.

#include <gpumem/error.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>

#include <algorithm>

namespace gpumem::mr {

void statistics_resource_adaptor::counter::add(std::int64_t n) noexcept
{
  current += n;
  total += n;
  peak = std::max(peak, current);
}

void statistics_resource_adaptor::counter::subtract(std::int64_t n) noexcept { current -= n; }

void statistics_resource_adaptor::counter::fold(counter const& child) noexcept
{
  // `current` is still the value from before the child's push: only the innermost scope counts.
  peak = std::max(peak, current + child.peak);
  current += child.current;
  total += child.total;
}

statistics_resource_adaptor::statistics_resource_adaptor(device_memory_resource* upstream)
  : resource_adaptor_base{upstream}, stack_(1)
{
}

statistics_resource_adaptor::counter statistics_resource_adaptor::get_bytes_counter() const noexcept
{
  gpumem::detail::lock_guard const lock{mutex_};
  return stack_.back().bytes;
}

statistics_resource_adaptor::counter statistics_resource_adaptor::get_allocations_counter() const noexcept
{
  gpumem::detail::lock_guard const lock{mutex_};
  return stack_.back().allocations;
}

statistics_resource_adaptor::counters statistics_resource_adaptor::get_counters() const noexcept
{
  gpumem::detail::lock_guard const lock{mutex_};
  return stack_.back();
}

std::size_t statistics_resource_adaptor::scope_depth() const noexcept
{
  gpumem::detail::lock_guard const lock{mutex_};
  return stack_.size() - 1;
}

statistics_resource_adaptor::counters statistics_resource_adaptor::push_counters()
{
  gpumem::detail::lock_guard const lock{mutex_};
  counters const outer = stack_.back();
  stack_.emplace_back();
  return outer;
}

statistics_resource_adaptor::counters statistics_resource_adaptor::pop_counters()
{
  gpumem::detail::lock_guard const lock{mutex_};
  expects(stack_.size() > 1, "pop_counters without a matching push_counters");
  counters const child = stack_.back();
  stack_.pop_back();
  stack_.back().bytes.fold(child.bytes);
  stack_.back().allocations.fold(child.allocations);
  return child;
}

void* statistics_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* const ptr = upstream_resource()->allocate(bytes, stream);
  gpumem::detail::lock_guard const lock{mutex_};
  stack_.back().bytes.add(static_cast<std::int64_t>(bytes));
  stack_.back().allocations.add(1);
  return ptr;
}

void statistics_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  {
    // Counted before the memory goes back, so that no other thread's allocation of the same memory is
    // counted while this one still is.
    gpumem::detail::lock_guard const lock{mutex_};
    stack_.back().bytes.subtract(static_cast<std::int64_t>(bytes));
    stack_.back().allocations.subtract(1);
  }
  upstream_resource()->deallocate(ptr, bytes, stream);
}

}  // namespace gpumem::mr

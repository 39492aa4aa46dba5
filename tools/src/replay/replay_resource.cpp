// The replayable resources by name (replay_resource.hpp): one entry per resource in `entries` below.
#include <gpumem/replay/replay_resource.hpp>

#include <gpumem/error.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <utility>

namespace gpumem {

namespace {

/**
 * @brief Forwards to its upstream and counts the bytes it holds: current and peak. Sits under a
 * sub-allocator, which calls it only to grow or shrink, so it is off the replay's fast path.
 * Invariant: current_ == sum of the sizes of upstream allocations not yet deallocated <= peak_.
 * Thread-safety: as the upstream's (the counters are atomics).
 */
class counting_upstream final : public mr::device_memory_resource {
 public:
  explicit counting_upstream(mr::device_memory_resource* upstream) noexcept : upstream_{upstream} {}

  [[nodiscard]] std::size_t peak_bytes() const noexcept { return peak_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t current_bytes() const noexcept { return current_.load(std::memory_order_relaxed); }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* const ptr = upstream_->allocate(bytes, stream);
    std::size_t const now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_->deallocate(ptr, bytes, stream);
    current_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  mr::device_memory_resource* upstream_;
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
};

/// Builds a chain bottom-up into a replay_resource's parts.
struct builder {
  std::vector<std::unique_ptr<mr::device_memory_resource>>& chain;
  std::function<std::size_t()>& peak_upstream;
  std::function<std::size_t()>& upstream;
  bool& reserves_upfront;
  replay_resource_options const& options;

  template <class R, class... Args>
  R* emplace(Args&&... args)
  {
    auto owned = std::make_unique<R>(std::forward<Args>(args)...);
    R* const raw = owned.get();
    chain.push_back(std::move(owned));
    return raw;
  }

  /// The sub-allocators' upstream (cuda, or simulated) behind a byte counter that the handle reports.
  counting_upstream* counted_upstream()
  {
    mr::device_memory_resource* base = nullptr;
    if (options.simulate) {
      base = emplace<mr::simulated_memory_resource>(options.simulated_capacity);
    } else {
      base = emplace<mr::cuda_memory_resource>();
    }
    auto* const counter = emplace<counting_upstream>(base);
    peak_upstream = [counter] { return counter->peak_bytes(); };
    upstream = [counter] { return counter->current_bytes(); };
    return counter;
  }
};

using build_function = void (*)(builder&);

struct entry {
  replay_resource_info info;
  build_function build;
};

void build_cuda(builder& b)
{
  // The counter on top is what the replay calls: its peak is the peak of the bytes cudaMalloc was asked for.
  b.counted_upstream();
}

void build_cuda_async(builder& b)
{
  auto* const r = b.emplace<mr::cuda_async_memory_resource>();
  b.peak_upstream = [r] { return static_cast<std::size_t>(r->usage().reserved_high); };
  b.upstream = [r] { return static_cast<std::size_t>(r->usage().reserved_current); };
}

void build_pool(builder& b) { b.emplace<mr::pool_memory_resource>(b.counted_upstream(), 0); }

void build_arena(builder& b)
{
  // Simulated: half the simulated space (never touched). Otherwise the arena's default, half the device's
  // free memory.
  std::optional<std::size_t> size;
  if (b.options.simulate) { size = b.options.simulated_capacity / 2 / 256 * 256; }
  b.emplace<mr::arena_memory_resource>(b.counted_upstream(), size);
  b.reserves_upfront = true;
}

void build_binning(builder& b)
{
  auto* const pool = b.emplace<mr::pool_memory_resource>(b.counted_upstream(), 0);
  b.emplace<mr::binning_memory_resource>(pool, 8, 22);
}

void build_vmm(builder& b)
{
  mr::vmm_pool_options options;
  options.slab_size = b.options.vmm_slab_size;
  options.max_mapping_size = b.options.vmm_max_mapping_size;
  options.mapping_divisor = b.options.vmm_mapping_divisor;
  static_assert(mr::vmm_pool_options{}.mapping_divisor == replay_resource_options{}.vmm_mapping_divisor,
                "the replay's vmm defaults follow the pool's");
  mr::vmm_pool_memory_resource* r = nullptr;
  if (b.options.simulate) {
    r = b.emplace<mr::vmm_pool_memory_resource>(
      std::make_unique<mr::simulated_vmm_provider>(b.options.simulated_capacity), options);
  } else {
    r = b.emplace<mr::vmm_pool_memory_resource>(options);
  }
  // Its physical memory is what it takes from the device.
  b.peak_upstream = [r] { return r->peak_physical_bytes(); };
  b.upstream = [r] { return r->physical_bytes(); };
}

constexpr std::array entries{
  entry{{"pool", "mr::pool_memory_resource over the upstream, initial size 0 (grows by doubling)", true}, build_pool},
  entry{{"vmm", "mr::vmm_pool_memory_resource: one virtual range, physical memory in slabs (32 MiB)", true},
        build_vmm},
  entry{{"arena", "mr::arena_memory_resource over the upstream (one fixed arena taken at construction)", true},
        build_arena},
  entry{{"binning", "mr::binning_memory_resource: bins 2^8..2^22 bytes over a pool (RMM's setup)", true},
        build_binning},
  entry{{"cuda_async", "mr::cuda_async_memory_resource: its own driver pool, release threshold: keep all", false},
        build_cuda_async},
  entry{{"cuda", "mr::cuda_memory_resource: cudaMalloc/cudaFree per call", false}, build_cuda},
};

constexpr std::array infos = [] {
  std::array<replay_resource_info, entries.size()> out{};
  for (std::size_t i = 0; i < entries.size(); ++i) { out[i] = entries[i].info; }
  return out;
}();

}  // namespace

std::span<replay_resource_info const> replay_resources() noexcept { return infos; }

replay_resource_info const* find_replay_resource(std::string_view name) noexcept
{
  auto const it = std::find_if(infos.begin(), infos.end(), [&](auto const& i) { return i.name == name; });
  return it == infos.end() ? nullptr : &*it;
}

std::string replay_resource_names(bool simulatable_only)
{
  std::string names;
  for (auto const& i : infos) {
    if (simulatable_only && !i.simulatable) { continue; }
    if (!names.empty()) { names += ", "; }
    names += i.name;
  }
  return names;
}

replay_resource::~replay_resource() { reset(); }

replay_resource::replay_resource(replay_resource&& other) noexcept
  : name_{std::move(other.name_)},
    chain_{std::move(other.chain_)},
    peak_upstream_{std::move(other.peak_upstream_)},
    upstream_{std::move(other.upstream_)},
    reserves_upfront_{other.reserves_upfront_}
{
}

replay_resource& replay_resource::operator=(replay_resource&& other) noexcept
{
  if (this != &other) {
    reset();
    name_ = std::move(other.name_);
    chain_ = std::move(other.chain_);
    peak_upstream_ = std::move(other.peak_upstream_);
    upstream_ = std::move(other.upstream_);
    reserves_upfront_ = other.reserves_upfront_;
  }
  return *this;
}

void replay_resource::reset() noexcept
{
  peak_upstream_ = nullptr;
  upstream_ = nullptr;
  while (!chain_.empty()) { chain_.pop_back(); }  // top first: a resource before its upstream
}

replay_resource make_replay_resource(std::string_view name, replay_resource_options const& options)
{
  auto const it = std::find_if(entries.begin(), entries.end(), [&](auto const& e) { return e.info.name == name; });
  if (it == entries.end()) {
    throw logic_error("unknown replay resource '" + std::string{name} +
                      "'; known resources: " + replay_resource_names());
  }
  if (options.simulate && !it->info.simulatable) {
    throw logic_error("resource '" + std::string{name} +
                      "' allocates device memory itself and cannot run over a simulated upstream; "
                      "resources that can: " + replay_resource_names(true));
  }
  replay_resource handle;
  handle.name_ = std::string{name};
  builder b{handle.chain_, handle.peak_upstream_, handle.upstream_, handle.reserves_upfront_, options};
  it->build(b);
  return handle;
}

namespace {
/// `options` with the probes of `resource`.
replay_options with_probes(replay_resource& resource, replay_options options)
{
  options.peak_upstream_bytes = [&resource] { return resource.peak_upstream_bytes(); };
  if (!options.upstream_bytes) { options.upstream_bytes = [&resource] { return resource.upstream_bytes(); }; }
  return options;
}
}  // namespace

replay_result replay(allocation_log_reader& log, replay_resource& resource, replay_options options)
{
  return replay(log, resource.get(), with_probes(resource, std::move(options)));
}

replay_result replay(allocation_log const& log, replay_resource& resource, replay_options options)
{
  return replay(log, resource.get(), with_probes(resource, std::move(options)));
}

}  // namespace gpumem

// The one registry of resources by name (resource_registry.hpp): one entry per resource in `entries` below.
#include <gpumem/registry/resource_registry.hpp>

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <utility>

namespace gpumem::registry {

/// Passed to an entry's build function: builds the chain bottom-up into a handle.
class resource_builder {
 public:
  resource_builder(resource_handle& handle, resource_options const& options) noexcept
    : handle_{&handle}, options_{&options}
  {
  }

  [[nodiscard]] resource_options const& options() const noexcept { return *options_; }

  /** @brief Constructs an R on top of the chain. @return it, owned by the handle. */
  template <class R, class... Args>
  R* emplace(Args&&... args)
  {
    return handle_->emplace<R>(std::forward<Args>(args)...);
  }

  /**
   * @brief The upstream (cuda, or simulated) behind the byte counter that the handle reports.
   * @return the counter: the upstream to pass to the resource under test.
   */
  mr::device_memory_resource* counted_upstream()
  {
    mr::device_memory_resource* base = nullptr;
    if (options_->simulate) {
      base = emplace<mr::simulated_memory_resource>(options_->simulated_capacity);
    } else if (options_->managed) {
      base = emplace<mr::managed_memory_resource>();
    } else {
      base = emplace<mr::cuda_memory_resource>();
    }
    auto* const counter = emplace<mr::statistics_resource_adaptor>(base);
    auto const bytes = [counter] { return counter->get_bytes_counter(); };
    handle_->peak_upstream_ = [bytes] { return static_cast<std::size_t>(bytes().peak); };
    handle_->upstream_ = [bytes] { return static_cast<std::size_t>(bytes().current); };
    handle_->upstream_allocations_ = [counter] {
      return static_cast<std::size_t>(counter->get_allocations_counter().total);
    };
    return counter;
  }

  /** @brief Reports a driver pool's reserved bytes instead of a counter's. */
  void report_pool(mr::cuda_async_memory_resource* pool)
  {
    handle_->peak_upstream_ = [pool] { return static_cast<std::size_t>(pool->usage().reserved_high); };
    handle_->upstream_ = [pool] { return static_cast<std::size_t>(pool->usage().reserved_current); };
  }

  /** @brief Reports a VMM pool's physical bytes: what it takes from the device. */
  void report_vmm(mr::vmm_pool_memory_resource* pool)
  {
    handle_->peak_upstream_ = [pool] { return pool->peak_physical_bytes(); };
    handle_->upstream_ = [pool] { return pool->physical_bytes(); };
    handle_->cross_stream_takes_ = [pool] { return pool->cross_stream_takes(); };
    handle_->cross_stream_waits_ = [pool] { return pool->cross_stream_waits(); };
  }

  void set_reserves_upfront() noexcept { handle_->reserves_upfront_ = true; }

 private:
  resource_handle* handle_;
  resource_options const* options_;
};

namespace {

using build_function = void (*)(resource_builder&);

struct entry {
  resource_info info;
  build_function build;
};

void build_pool(resource_builder& b) { b.emplace<mr::pool_memory_resource>(b.counted_upstream(), 0); }

void build_vmm(resource_builder& b)
{
  mr::vmm_pool_options options;
  options.slab_size = b.options().vmm_slab_size;
  options.max_mapping_size = b.options().vmm_max_mapping_size;
  options.mapping_divisor = b.options().vmm_mapping_divisor;
  static_assert(mr::vmm_pool_options{}.mapping_divisor == resource_options{}.vmm_mapping_divisor,
                "the registry's vmm defaults follow the pool's");
  mr::vmm_pool_memory_resource* r = nullptr;
  if (b.options().simulate) {
    r = b.emplace<mr::vmm_pool_memory_resource>(
      std::make_unique<mr::simulated_vmm_provider>(b.options().simulated_capacity), options);
  } else {
    r = b.emplace<mr::vmm_pool_memory_resource>(options);
  }
  // Its physical memory is what it takes from the device; it has no upstream resource to count.
  b.report_vmm(r);
}

void build_arena(resource_builder& b)
{
  // Simulated: half the simulated space (never touched). Otherwise the arena's default: half the device's
  // free memory.
  std::optional<std::size_t> size;
  if (b.options().simulate) { size = b.options().simulated_capacity / 2 / 256 * 256; }
  b.emplace<mr::arena_memory_resource>(b.counted_upstream(), size);
  b.set_reserves_upfront();
}

void build_binning(resource_builder& b)
{
  auto* const pool = b.emplace<mr::pool_memory_resource>(b.counted_upstream(), 0);
  b.emplace<mr::binning_memory_resource>(pool, 18, 22);
}

/// Blocks of the workload's largest request, batches of at most 256 MiB (RMM's default of 128 blocks up to
/// 2 MiB blocks), one batch preallocated (RMM's default).
void build_fixed_size(resource_builder& b)
{
  std::size_t const block = b.options().max_request;
  if (block == 0) {
    throw logic_error("resource 'fixed_size' serves one block size and needs the workload's largest request "
                      "(resource_options::max_request); it cannot replay a log of any sizes");
  }
  std::size_t const per_batch = std::clamp<std::size_t>((std::size_t{256} << 20) / block, 1, 128);
  b.emplace<mr::fixed_size_memory_resource>(b.counted_upstream(), block, per_batch, 1);
}

void build_cuda_async(resource_builder& b) { b.report_pool(b.emplace<mr::cuda_async_memory_resource>()); }

/// cudaMallocAsync as programs use it: the device's default pool, release threshold at the maximum. No
/// peak: the default pool outlives the handle and keeps its high-water mark.
void build_cuda_async_default(resource_builder& b)
{
  cuda_device_id const device = get_current_cuda_device();
  cudaMemPool_t const pool = mr::default_memory_pool(device);
  mr::set_release_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  b.emplace<mr::cuda_async_view_memory_resource>(pool, device);
}

/// The counter on top is what is measured: its peak is the peak of the bytes cudaMalloc was asked for.
void build_cuda(resource_builder& b) { (void)b.counted_upstream(); }

constexpr std::array entries{
  entry{{"pool", "mr::pool_memory_resource over the upstream, initial size 0 (grows by doubling)", false, true, true, true},
        build_pool},
  entry{{"vmm", "mr::vmm_pool_memory_resource: one virtual range, physical memory in slabs (32 MiB)", false, true,
         true, true},
        build_vmm},
  entry{{"arena", "mr::arena_memory_resource: one arena (half the free memory) taken at construction", false, true,
         true, true},
        build_arena},
  entry{{"binning", "mr::binning_memory_resource: bins 256 KiB..4 MiB over a pool (RMM's benchmarks)", false, true,
         true, true},
        build_binning},
  entry{{"fixed_size", "mr::fixed_size_memory_resource: blocks of the workload's largest request", false, true,
         false, true},
        build_fixed_size},
  entry{{"cuda_async", "mr::cuda_async_memory_resource: a driver pool of its own, release threshold: keep all",
         false, false, true, true},
        build_cuda_async},
  entry{{"cuda_async_default", "cudaMallocAsync on the device's default pool, release threshold: keep all (peer)",
         true, false, true, false},
        build_cuda_async_default},
  entry{{"cuda", "mr::cuda_memory_resource: cudaMalloc/cudaFree per call (peer)", true, false, true, true},
        build_cuda},
};

constexpr std::array infos = [] {
  std::array<resource_info, entries.size()> out{};
  for (std::size_t i = 0; i < entries.size(); ++i) { out[i] = entries[i].info; }
  return out;
}();

}  // namespace

resource_handle::~resource_handle() { reset(); }

resource_handle::resource_handle(resource_handle&& other) noexcept
  : name_{std::move(other.name_)},
    chain_{std::move(other.chain_)},
    peak_upstream_{std::move(other.peak_upstream_)},
    upstream_{std::move(other.upstream_)},
    upstream_allocations_{std::move(other.upstream_allocations_)},
    cross_stream_takes_{std::move(other.cross_stream_takes_)},
    cross_stream_waits_{std::move(other.cross_stream_waits_)},
    reserves_upfront_{other.reserves_upfront_}
{
  other.reset();
}

resource_handle& resource_handle::operator=(resource_handle&& other) noexcept
{
  if (this != &other) {
    reset();
    name_ = std::move(other.name_);
    chain_ = std::move(other.chain_);
    peak_upstream_ = std::move(other.peak_upstream_);
    upstream_ = std::move(other.upstream_);
    upstream_allocations_ = std::move(other.upstream_allocations_);
    cross_stream_takes_ = std::move(other.cross_stream_takes_);
    cross_stream_waits_ = std::move(other.cross_stream_waits_);
    reserves_upfront_ = other.reserves_upfront_;
    other.reset();
  }
  return *this;
}

void resource_handle::reset() noexcept
{
  peak_upstream_ = nullptr;
  upstream_ = nullptr;
  upstream_allocations_ = nullptr;
  cross_stream_takes_ = nullptr;
  cross_stream_waits_ = nullptr;
  while (!chain_.empty()) { chain_.pop_back(); }  // top first: a resource before its upstream
}

std::optional<std::size_t> resource_handle::peak_upstream_bytes() const
{
  return peak_upstream_ ? std::optional{peak_upstream_()} : std::nullopt;
}

std::optional<std::size_t> resource_handle::upstream_bytes() const
{
  return upstream_ ? std::optional{upstream_()} : std::nullopt;
}

std::optional<std::size_t> resource_handle::upstream_allocations() const
{
  return upstream_allocations_ ? std::optional{upstream_allocations_()} : std::nullopt;
}

std::optional<std::size_t> resource_handle::cross_stream_takes() const
{
  return cross_stream_takes_ ? std::optional{cross_stream_takes_()} : std::nullopt;
}

std::optional<std::size_t> resource_handle::cross_stream_waits() const
{
  return cross_stream_waits_ ? std::optional{cross_stream_waits_()} : std::nullopt;
}

std::span<resource_info const> resources() noexcept { return infos; }

resource_info const* find_resource(std::string_view name) noexcept
{
  auto const it = std::find_if(infos.begin(), infos.end(), [&](auto const& i) { return i.name == name; });
  return it == infos.end() ? nullptr : &*it;
}

std::string resource_names(std::function<bool(resource_info const&)> const& keep)
{
  std::string names;
  for (auto const& i : infos) {
    if (keep && !keep(i)) { continue; }
    if (!names.empty()) { names += ", "; }
    names += i.name;
  }
  return names;
}

resource_handle make_resource(std::string_view name, resource_options const& options)
{
  auto const it = std::find_if(entries.begin(), entries.end(), [&](auto const& e) { return e.info.name == name; });
  if (it == entries.end()) {
    throw logic_error("unknown resource '" + std::string{name} + "'; known resources: " + resource_names());
  }
  if (options.simulate && options.managed) {
    throw logic_error("resource '" + std::string{name} + "': simulate and managed name two upstreams; choose one");
  }
  if (options.managed && !it->info.simulatable) {
    throw logic_error("resource '" + std::string{name} + "' allocates device memory itself and cannot run over "
                      "managed memory; resources that can: " +
                      resource_names([](auto const& i) { return i.simulatable; }));
  }
  if (options.simulate && !it->info.simulatable) {
    throw logic_error("resource '" + std::string{name} +
                      "' allocates device memory itself and cannot run over a simulated upstream; "
                      "resources that can: " + resource_names([](auto const& i) { return i.simulatable; }));
  }
  resource_handle handle{std::string{name}};
  resource_builder builder{handle, options};
  it->build(builder);
  return handle;
}

}  // namespace gpumem::registry

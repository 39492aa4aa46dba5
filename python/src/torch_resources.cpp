// The device's PyTorch resource (torch_hooks.hpp): gpumem.torch's configuration, the resource built on a device's
// first allocation, making room when an allocation fails, empty_cache and the memory fraction.
//
// Configuration: gpumem.torch parses GPUMEM_TORCH_ALLOC_CONF (python/gpumem/torch/_config.py) and hands the
// values to _gpumem._torch_configure; this file keeps them in one struct, read when a device is prepared.
// Preparation: the first allocation from pool (0, 0) on device d builds the configured resource (the VMM pool by
// default) and makes it d's gpumem resource, in one step with the check that the program has set none
// (mr::set_per_device_resource_if_unset); a resource the program set is kept, and gpumem's log says so. Devices
// are prepared one by one, on first use, so a process that uses one GPU touches no other. After that an
// allocation pays one atomic load here.
// Python (private, used by gpumem.torch):
//   _torch_configure(...), _torch_reset()              set the configuration; restore everything (tests)
//   _torch_prepared(device), _torch_empty_cache(device), _torch_set_memory_fraction(fraction, device),
//   _torch_memory_fraction(device), _torch_add_spill_manager(manager), _torch_clear_spill_managers()
#include "registry.hpp"
#include "torch_hooks.hpp"
#include "torch_resources.hpp"
#include "unified_object.hpp"

#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/debug_log.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::python {
namespace {

using mr::device_memory_resource;
using torch_resources::max_devices;

enum class resource_kind { vmm, pool, async, cuda, managed, current };

constexpr std::array<std::pair<char const*, resource_kind>, 6> resource_names{{{"vmm", resource_kind::vmm},
                                                                               {"pool", resource_kind::pool},
                                                                               {"async", resource_kind::async},
                                                                               {"cuda", resource_kind::cuda},
                                                                               {"managed", resource_kind::managed},
                                                                               {"current", resource_kind::current}}};

/** @brief What to build on each device (GPUMEM_TORCH_ALLOC_CONF's resource keys, parsed by gpumem.torch). */
struct torch_config {
  resource_kind resource{resource_kind::vmm};
  // slab_size, release_threshold, mapping_divisor, max_mapping_size; the defaults are gpumem.torch's (pieces of
  // 2 MiB: _config.py's DEFAULTS), also for torch_allocator() without install(). Small blocks come from the
  // heap itself, not from pages of their size class: docs/python.md, "Why these defaults".
  mr::vmm_pool_options vmm{.slab_size = std::size_t{2} << 20, .mapping_divisor = 0, .small_block_limit = 0};
  std::size_t initial_pool_size{};
  std::optional<std::size_t> maximum_pool_size;
  std::optional<std::size_t> memory_limit;
  std::optional<double> memory_fraction;  // of the device's total; wins over memory_limit
  std::string log;                        // a LoggingResourceAdaptor's file name ("" : none)
};

/** @brief gpumem.torch's state of one device. */
struct device_state {
  std::atomic<bool> prepared{false};  // set once the device's resource is settled (built, or the program's kept)
  std::mutex mutex;                   // guards the rest, and serialises preparation
  std::vector<std::shared_ptr<device_memory_resource>> chain;  // what gpumem.torch built: base first, top last
  std::optional<double> pending_fraction;  // set_memory_fraction before the device was prepared
  std::optional<std::size_t> limit;        // the memory limit applied at build time (non-VMM resources)
};

struct spill_entry {
  spill_manager* manager;
  py::object owner;  // the Python SpillManager, kept alive while registered
};

/** @brief Leaked on purpose: PyTorch may allocate and free during C++ static destruction. */
struct torch_state {
  std::mutex config_mutex;
  torch_config config;
  std::array<device_state, max_devices> devices;
  std::mutex spill_mutex;  // held while spilling, so that a manager is not unregistered meanwhile
  std::vector<spill_entry> spill;
};

torch_state& state()
{
  static auto* const instance = new torch_state;  // NOLINT(cppcoreguidelines-owning-memory)
  return *instance;
}

device_state& device_of(int device)
{
  if (device < 0 || device >= max_devices) {
    throw logic_error("gpumem.torch: device " + std::to_string(device) + " is beyond the " +
                      std::to_string(max_devices) + " devices gpumem.torch keeps state for");
  }
  return state().devices[static_cast<std::size_t>(device)];
}

int resolve(int device) { return device >= 0 ? device : get_current_cuda_device().value(); }

std::size_t device_total(int device) { return available_device_memory(cuda_device_id{device}).total; }

std::size_t fraction_of_total(double fraction, int device)
{
  return static_cast<std::size_t>(std::floor(fraction * static_cast<double>(device_total(device))));
}

/** @brief RMM's and gpumem's per-device log name: `name.ext` -> the absolute path of `name.dev<device>.ext`. */
std::string log_file_for(std::string const& name, int device)
{
  std::filesystem::path path{name};
  std::filesystem::path const ext = path.extension();
  path.replace_extension();
  path += ".dev" + std::to_string(device);
  path += ext;
  return std::filesystem::absolute(path).string();
}

/** @brief The Python name of a resource gpumem.torch may find on a device. */
std::string describe(device_memory_resource const* resource)
{
  if (dynamic_cast<mr::vmm_pool_memory_resource const*>(resource) != nullptr) { return "VmmPoolMemoryResource"; }
  if (dynamic_cast<mr::pool_memory_resource const*>(resource) != nullptr) { return "PoolMemoryResource"; }
  if (dynamic_cast<mr::cuda_async_memory_resource const*>(resource) != nullptr) { return "CudaAsyncMemoryResource"; }
  if (dynamic_cast<mr::cuda_memory_resource const*>(resource) != nullptr) { return "CudaMemoryResource"; }
  if (dynamic_cast<mr::managed_memory_resource const*>(resource) != nullptr) { return "ManagedMemoryResource"; }
  return "a resource set by the program";
}

/** @brief The configured resource for `device` (current), base first. @throws what the constructors throw. */
std::vector<std::shared_ptr<device_memory_resource>> build_chain(torch_config const& config, int device,
                                                                 std::optional<std::size_t> limit)
{
  std::vector<std::shared_ptr<device_memory_resource>> chain;
  switch (config.resource) {
    case resource_kind::vmm: {
      mr::vmm_pool_options options = config.vmm;
      if (limit) {
        expects(*limit >= options.slab_size, "gpumem.torch: the memory limit of " + std::to_string(*limit) +
                                               " bytes on device " + std::to_string(device) +
                                               " is smaller than one slab (slab_size " +
                                               std::to_string(options.slab_size) + ")");
      }
      options.maximum_physical_size = limit;
      chain.push_back(std::make_shared<mr::vmm_pool_memory_resource>(options));
      break;
    }
    case resource_kind::pool: {  // the pool is the base; it owns its upstream, destroyed after it
      auto upstream = std::make_shared<mr::cuda_memory_resource>();
      auto pool = std::make_shared<mr::pool_memory_resource>(upstream.get(), config.initial_pool_size,
                                                             config.maximum_pool_size);
      mr::pool_memory_resource* const raw = pool.get();
      chain.push_back(std::shared_ptr<device_memory_resource>(
        raw, [pool = std::move(pool), upstream = std::move(upstream)](device_memory_resource*) mutable noexcept {
          pool.reset();
          upstream.reset();
        }));
      break;
    }
    case resource_kind::async: chain.push_back(std::make_shared<mr::cuda_async_memory_resource>()); break;
    case resource_kind::cuda: chain.push_back(std::make_shared<mr::cuda_memory_resource>()); break;
    case resource_kind::managed: chain.push_back(std::make_shared<mr::managed_memory_resource>()); break;
    case resource_kind::current: throw logic_error("gpumem.torch: resource:current builds nothing");
  }
  if (limit && config.resource != resource_kind::vmm) {
    chain.push_back(std::make_shared<mr::limiting_resource_adaptor>(chain.back().get(), *limit));
  }
  if (!config.log.empty()) {
    chain.push_back(std::make_shared<mr::logging_resource_adaptor>(chain.back().get(), log_file_for(config.log, device)));
  }
  return chain;
}

/** @brief Settles `device`'s resource. @pre d.mutex is held; `device` is current. */
void settle(int device, device_state& d)
{
  torch_config config;
  {
    std::scoped_lock const lock{state().config_mutex};
    config = state().config;
  }
  if (config.resource == resource_kind::current) { return; }
  cuda_device_id const id{device};
  auto keep_programs = [&] {
    detail::log(log_level::info, [&] {
      return "gpumem.torch: device " + std::to_string(device) + " keeps the resource the program set (" +
             describe(mr::get_per_device_resource(id)) + "); the configured resource is not built";
    });
  };
  if (mr::is_per_device_resource_set(id)) {
    keep_programs();
    return;
  }
  std::optional<double> const fraction = d.pending_fraction ? d.pending_fraction : config.memory_fraction;
  std::optional<std::size_t> const limit = fraction ? fraction_of_total(*fraction, device) : config.memory_limit;
  auto chain = build_chain(config, device, limit);
  if (!mr::set_per_device_resource_if_unset(id, chain.back())) {  // the program set one meanwhile
    keep_programs();
    return;
  }
  d.chain = std::move(chain);
  d.limit = limit;
}

/** @brief base_resource with d.mutex held. */
std::shared_ptr<device_memory_resource> base_locked(int device, device_state const& d)
{
  mr::resource_hold hold = mr::hold_per_device_resource(cuda_device_id{device});
  if (!d.chain.empty() && hold.resource == d.chain.back().get()) { return d.chain.front(); }
  if (hold.owner) { return std::move(hold.owner); }
  return {hold.resource, [](device_memory_resource*) noexcept {}};  // raw or default: kept by the program or gpumem
}

/** @brief Gives back what `device`'s resource holds free: a VMM pool's wholly free slabs, a CUDA memory pool's cache
 * (after the device's work, so that completed frees are cached). Other resources keep what they hold. */
std::size_t empty_device(int device)
{
  std::shared_ptr<device_memory_resource> const base = torch_resources::base_resource(device);
  if (auto* const vmm = dynamic_cast<mr::vmm_pool_memory_resource*>(base.get())) {
    cuda_set_device_raii const on_device{cuda_device_id{device}};
    return vmm->release_unused();
  }
  if (auto* const async = dynamic_cast<mr::cuda_async_view_memory_resource*>(base.get())) {
    cuda_set_device_raii const on_device{cuda_device_id{device}};
    std::size_t const before = async->usage().reserved_current;  // before the synchronisation, which may trim too
    synchronize_device();
    async->trim(0);
    std::size_t const after = async->usage().reserved_current;
    return before > after ? before - after : 0;
  }
  return 0;
}

/** @brief The bytes released on `device` (< 0: every prepared device). @throws as release_unused. */
std::size_t empty_cache_or_throw(int device)
{
  std::size_t released = 0;
  if (device >= 0) {
    (void)device_of(device);
    released += empty_device(device);
  } else {
    for (int d = 0; d < max_devices; ++d) {
      if (state().devices[static_cast<std::size_t>(d)].prepared.load(std::memory_order_acquire)) {
        released += empty_device(d);
      }
    }
  }
  return released + torch_hooks::release_idle_pools(device);
}

void set_fraction_or_throw(double fraction, int device)
{
  if (!(fraction > 0.0 && fraction <= 1.0)) {  // also refuses NaN
    throw logic_error("set_memory_fraction: the fraction " + std::to_string(fraction) + " is not in (0, 1]");
  }
  device = resolve(device);
  device_state& d = device_of(device);
  std::scoped_lock const lock{d.mutex};
  if (!d.prepared.load(std::memory_order_acquire)) {
    d.pending_fraction = fraction;  // applied when the device's resource is built
    return;
  }
  std::shared_ptr<device_memory_resource> const base = base_locked(device, d);
  if (auto* const vmm = dynamic_cast<mr::vmm_pool_memory_resource*>(base.get())) {
    vmm->set_maximum_physical_size(std::max(fraction_of_total(fraction, device), vmm->slab_size()));
    return;
  }
  throw logic_error("set_memory_fraction: device " + std::to_string(device) + "'s PyTorch resource (" +
                    describe(base.get()) +
                    ") takes no memory fraction once it is built; a VmmPoolMemoryResource does (GPUMEM_TORCH_ALLOC_CONF "
                    "resource:vmm, the default). Other resources take memory_fraction or memory_limit in the "
                    "configuration, applied when the device's resource is built (before its first allocation)");
}

/** @brief The device's memory fraction: the cap of its resource over the device's total (1.0: no cap). */
double memory_fraction_of(int device)
{
  device = resolve(device);
  device_state& d = device_of(device);
  std::optional<std::size_t> cap;
  {
    std::scoped_lock const lock{d.mutex};
    if (!d.prepared.load(std::memory_order_acquire)) {
      if (d.pending_fraction) { return *d.pending_fraction; }
      std::scoped_lock const config_lock{state().config_mutex};
      torch_config const& config = state().config;
      if (config.memory_fraction) { return *config.memory_fraction; }
      cap = config.resource == resource_kind::current ? std::nullopt : config.memory_limit;
    } else {
      std::shared_ptr<device_memory_resource> const base = base_locked(device, d);
      if (auto* const vmm = dynamic_cast<mr::vmm_pool_memory_resource*>(base.get())) {
        cap = vmm->maximum_physical_size();
      } else if (!d.chain.empty() && base.get() == d.chain.front().get()) {
        cap = d.limit;
      }
    }
  }
  if (!cap) { return 1.0; }
  return std::min(1.0, static_cast<double>(*cap) / static_cast<double>(device_total(device)));
}

void configure(std::string const& resource, std::size_t slab_size, std::optional<std::size_t> release_threshold,
               std::size_t mapping_divisor, std::optional<std::size_t> max_mapping_size, std::size_t initial_pool_size,
               std::optional<std::size_t> maximum_pool_size, std::optional<std::size_t> memory_limit,
               std::optional<double> memory_fraction, std::string log)
{
  torch_config config;
  bool known = false;
  for (auto const& [name, kind] : resource_names) {
    if (resource == name) {
      config.resource = kind;
      known = true;
    }
  }
  if (!known) {
    throw py::value_error("gpumem.torch: resource '" + resource +
                          "' is not one of vmm, pool, async, cuda, managed, current");
  }
  if (slab_size == 0) { throw py::value_error("gpumem.torch: slab_size must not be 0"); }
  if (memory_fraction && !(*memory_fraction > 0.0 && *memory_fraction <= 1.0)) {
    throw py::value_error("gpumem.torch: memory_fraction " + std::to_string(*memory_fraction) + " is not in (0, 1]");
  }
  config.vmm.slab_size = slab_size;
  config.vmm.release_threshold = release_threshold;
  config.vmm.mapping_divisor = mapping_divisor;
  config.vmm.max_mapping_size = max_mapping_size;
  config.initial_pool_size = initial_pool_size;
  config.maximum_pool_size = maximum_pool_size;
  config.memory_limit = memory_limit;
  config.memory_fraction = memory_fraction;
  config.log = std::move(log);
  std::scoped_lock const lock{state().config_mutex};
  state().config = std::move(config);
}

/** @brief Restores the state before gpumem.torch was configured (tests): each device gets back its default
 * resource where gpumem.torch's is still set; statistics, spill managers and the configuration are cleared. */
void reset_everything()
{
  for (int device = 0; device < max_devices; ++device) {
    device_state& d = state().devices[static_cast<std::size_t>(device)];
    std::vector<std::shared_ptr<device_memory_resource>> chain;
    {
      std::scoped_lock const lock{d.mutex};
      if (!d.chain.empty() && mr::get_per_device_resource(cuda_device_id{device}) == d.chain.back().get()) {
        (void)mr::set_per_device_resource(cuda_device_id{device}, nullptr);
      }
      chain = std::move(d.chain);
      d.chain.clear();
      d.pending_fraction.reset();
      d.limit.reset();
      d.prepared.store(false, std::memory_order_release);
    }
    while (!chain.empty()) { chain.pop_back(); }  // top first: adaptors before what they wrap
  }
  {
    std::scoped_lock const lock{state().config_mutex};
    state().config = {};
  }
  std::vector<spill_entry> dropped;  // the Python references go with the GIL held, after the lock
  {
    std::scoped_lock const lock{state().spill_mutex};
    dropped.swap(state().spill);
  }
  torch_resources::reset_statistics();
}

registration const torch_resources_binding{binding_order::allocators, "torch_resources", [](py::module_& m) {
  using opt_size = std::optional<std::size_t>;
  m.def("_torch_configure", &configure, py::kw_only(), py::arg("resource") = "vmm",
        py::arg("slab_size") = mr::vmm_pool_options{}.slab_size, py::arg("release_threshold") = py::none(),
        py::arg("mapping_divisor") = mr::vmm_pool_options{}.mapping_divisor, py::arg("max_mapping_size") = py::none(),
        py::arg("initial_pool_size") = 0, py::arg("maximum_pool_size") = opt_size{},
        py::arg("memory_limit") = opt_size{}, py::arg("memory_fraction") = std::optional<double>{},
        py::arg("log") = "",
        "Sets the resource gpumem.torch builds on each device's first PyTorch allocation (values parsed by "
        "gpumem.torch). Devices already prepared keep theirs.");
  m.def("_torch_reset", &reset_everything, "Restores gpumem.torch's state to before its configuration (for tests).");
  m.def(
    "_torch_prepared",
    [](int device) { return device_of(resolve(device)).prepared.load(std::memory_order_acquire); },
    py::arg("device"), "Whether the device's PyTorch resource is settled (after its first allocation).");
  m.def(
    "_torch_empty_cache", [](int device) { return empty_cache_or_throw(device); }, py::arg("device") = -1,
    py::call_guard<py::gil_scoped_release>(), "gpumem.torch.empty_cache: returns the bytes given back.");
  m.def(
    "_torch_set_memory_fraction", [](double fraction, int device) { set_fraction_or_throw(fraction, device); },
    py::arg("fraction"), py::arg("device") = -1, py::call_guard<py::gil_scoped_release>(),
    "Caps the device's PyTorch resource at `fraction` of the device's total memory.");
  m.def(
    "_torch_memory_fraction", [](int device) { return memory_fraction_of(device); }, py::arg("device") = -1,
    "The device's cap over its total memory (1.0: none).");
  m.def(
    "_torch_add_spill_manager",
    [](py::object const& manager) {
      spill_manager* const cpp = spill_of(manager);
      if (cpp == nullptr) { throw py::type_error("gpumem.torch: a spill manager must be a gpumem.SpillManager, not None"); }
      spill_entry entry{cpp, manager};  // the reference is taken and, when not kept, dropped with the GIL
      py::gil_scoped_release const release;  // make_room holds the mutex without the GIL: never wait for it with it
      std::scoped_lock const lock{state().spill_mutex};
      bool const known = std::any_of(state().spill.begin(), state().spill.end(),
                                     [cpp](spill_entry const& e) { return e.manager == cpp; });
      if (!known) { state().spill.push_back(std::move(entry)); }
    },
    py::arg("manager"), "Asks `manager` (a gpumem.SpillManager) to spill when a PyTorch allocation fails.");
  m.def(
    "_torch_clear_spill_managers",
    [] {
      std::vector<spill_entry> dropped;
      {
        py::gil_scoped_release const release;
        std::scoped_lock const lock{state().spill_mutex};
        dropped.swap(state().spill);
      }
    },
    "Unregisters every spill manager.");
}};

}  // namespace

namespace torch_resources {

std::shared_ptr<device_memory_resource> base_resource(int device) noexcept
{
  try {
    device_state& d = device_of(device);
    if (!d.prepared.load(std::memory_order_acquire)) { return {}; }
    std::scoped_lock const lock{d.mutex};
    return base_locked(device, d);
  } catch (...) {
    return {};
  }
}

}  // namespace torch_resources

namespace torch_hooks {

gpumem_status prepare_device(int device) noexcept
{
  try {
    device_state& d = device_of(device);
    if (d.prepared.load(std::memory_order_acquire)) { return GPUMEM_SUCCESS; }
    std::scoped_lock const lock{d.mutex};
    if (!d.prepared.load(std::memory_order_relaxed)) {
      settle(device, d);
      d.prepared.store(true, std::memory_order_release);
    }
    return GPUMEM_SUCCESS;
  } catch (...) {
    return fail_with_current_exception();
  }
}

bool make_room(int device, std::size_t size) noexcept
{
  std::size_t freed = 0;
  try {
    std::scoped_lock const lock{state().spill_mutex};
    for (auto const& entry : state().spill) {
      if (freed >= size) { break; }
      try {
        freed += entry.manager->spill(size - freed);
      } catch (std::exception const& e) {  // one manager failing must not keep the others from spilling
        detail::log(log_level::warn, std::string{"gpumem.torch: a spill manager failed to spill: "} + e.what());
      }
    }
  } catch (...) {  // the mutex could not be taken: nothing spilled
  }
  freed += release_idle_pools(device);
  if (freed == 0) { return false; }
  torch_resources::count_alloc_retry(device);
  return true;
}

gpumem_status empty_cache(int device, std::size_t* released) noexcept
{
  if (released != nullptr) { *released = 0; }
  try {
    std::size_t const bytes = empty_cache_or_throw(device);
    if (released != nullptr) { *released = bytes; }
    return GPUMEM_SUCCESS;
  } catch (...) {
    return fail_with_current_exception();
  }
}

gpumem_status set_memory_fraction(double fraction, int device) noexcept
{
  try {
    set_fraction_or_throw(fraction, device);
    return GPUMEM_SUCCESS;
  } catch (...) {
    return fail_with_current_exception();
  }
}

}  // namespace torch_hooks
}  // namespace gpumem::python

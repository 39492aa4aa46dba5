// import_memory and imported_memory (ipc.hpp): finding the device, then mapping the exporter's pieces (vmm)
// or opening its CUDA IPC handle.
#include "ipc/descriptor_server.hpp"
#include "ipc/device_identity.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>
#include <gpumem/error.hpp>
#include <gpumem/ipc.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::ipc {

/// A vmm import: the reservation and the pieces mapped in it, taken down when the last owner goes.
struct imported_memory::mapping {
  std::unique_ptr<mr::virtual_memory_provider> provider;
  std::uintptr_t base{};
  std::size_t reserved{};
  std::vector<std::pair<std::uintptr_t, std::size_t>> mapped;  // address, bytes

  mapping() = default;
  mapping(mapping const&) = delete;
  mapping& operator=(mapping const&) = delete;
  ~mapping()
  {
    for (auto const& [address, bytes] : mapped) { provider->unmap(address, bytes); }
    if (reserved > 0) { provider->unreserve(base, reserved); }
  }
};

namespace {

/// This process's ordinal of the device `f` names. @throws logic_error when it cannot see it.
int local_device(memory_handle const& handle)
{
  memory_handle::fields const& f = handle.contents();
  detail::backend& be = detail::get_backend();
  expects(f.backend == be.kind(), "gpumem IPC: a " + handle.describe() + " cannot be imported on the " +
                                    std::string{to_string(be.kind())} + " backend");
  if (f.backend == backend_kind::host) {
    int const count = be.device_count();
    expects(f.device < count, "gpumem IPC: the " + handle.describe() + " names host device " + std::to_string(f.device) +
                                ", this process has " + std::to_string(count));
    return f.device;
  }
  try {
    return detail::ipc::device_at(f.pci_bus_id);
  } catch (cuda_error const&) {
    throw logic_error("gpumem IPC: the " + handle.describe() + " lives on the GPU at PCI bus id " + f.pci_bus_id +
                      ", which this process cannot see (CUDA_VISIBLE_DEVICES?)");
  }
}

/// Waits for the work of `device` (memory about to be unmapped may still be in use). Never throws.
void wait_for_device(int device) noexcept
{
  try {
    detail::backend& be = detail::get_backend();
    int const previous = be.current_device();
    if (previous != device) { be.set_current_device(device); }
    be.device_synchronize();
    if (previous != device) { be.set_current_device(previous); }
  } catch (std::exception const& e) {
    std::fprintf(stderr, "gpumem IPC: waiting for device %d before unmapping failed: %s\n", device, e.what());
  }
}

}  // namespace

imported_memory import_memory(memory_handle const& handle, std::vector<int> const& peers)
{
  memory_handle::fields const& f = handle.contents();
  int const device = local_device(handle);
  imported_memory result;
  result.bytes_ = f.bytes;
  result.device_ = device;
  result.kind_ = f.kind;
  if (f.kind != mechanism::vmm) {
    expects(f.exporter_pid != ::getpid(),
            "gpumem IPC: the " + handle.describe() +
              " was exported by this process; CUDA cannot import its own CUDA IPC or memory pool handles there (use the pointer)");
  }
  detail::backend& be = detail::get_backend();
  if (f.kind == mechanism::cuda_ipc) {
    void* const base = be.ipc_open_mem_handle(f.cuda_data, device);
    result.base_ = base;
    result.data_ = static_cast<char*>(base) + f.offset;
    return result;
  }
  if (f.kind == mechanism::async_pool) {
    std::vector<mr::owned_fd> const pool_fd =
      detail::ipc::fetch(f.server_address, f.token, 1, static_cast<long long>(f.exporter_pid));
    cudaMemPool_t const pool = be.mempool_import_handle(pool_fd.front().get());
    try {
      result.base_ = be.mempool_import_pointer(pool, f.cuda_data);
    } catch (...) {
      be.mempool_destroy(pool);
      throw;
    }
    result.imported_pool_ = pool;
    result.data_ = static_cast<char*>(result.base_) + f.offset;
    return result;
  }
  std::vector<mr::owned_fd> const descriptors =
    detail::ipc::fetch(f.server_address, f.token, f.piece_bytes.size(), static_cast<long long>(f.exporter_pid));
  auto m = std::make_shared<imported_memory::mapping>();
  m->provider = mr::make_device_vmm_provider(device, peers);
  std::size_t const granularity = m->provider->granularity();
  std::size_t total = 0;
  for (std::size_t const piece : f.piece_bytes) {
    expects(piece % granularity == 0, "gpumem IPC: a piece of " + format_bytes(piece) + " of the " + handle.describe() +
                                        " is not a multiple of this device's granularity " + format_bytes(granularity));
    total += piece;
  }
  m->base = m->provider->reserve(total);
  m->reserved = total;
  std::uintptr_t address = m->base;
  for (std::size_t i = 0; i < descriptors.size(); ++i) {
    std::size_t const piece = f.piece_bytes[i];
    mr::physical_handle const imported = m->provider->import_handle(descriptors[i].get(), piece);
    try {
      m->provider->map(address, piece, imported);
    } catch (...) {
      m->provider->release(imported);
      throw;  // m unmaps what it mapped and unreserves
    }
    m->provider->release(imported);  // the mapping holds the memory until it is unmapped
    m->mapped.emplace_back(address, piece);
    address += piece;
  }
  result.data_ = reinterpret_cast<void*>(m->base + f.offset);
  result.mapping_ = std::move(m);
  return result;
}

imported_memory::imported_memory(imported_memory&& other) noexcept
  : data_{std::exchange(other.data_, nullptr)},
    bytes_{other.bytes_},
    device_{other.device_},
    kind_{other.kind_},
    base_{std::exchange(other.base_, nullptr)},
    imported_pool_{std::exchange(other.imported_pool_, nullptr)},
    mapping_{std::move(other.mapping_)}
{
}

imported_memory& imported_memory::operator=(imported_memory&& other) noexcept
{
  if (this != &other) {
    close();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = other.bytes_;
    device_ = other.device_;
    kind_ = other.kind_;
    base_ = std::exchange(other.base_, nullptr);
    imported_pool_ = std::exchange(other.imported_pool_, nullptr);
    mapping_ = std::move(other.mapping_);
  }
  return *this;
}

imported_memory::~imported_memory() { close(); }

void imported_memory::close() noexcept
{
  if (data_ == nullptr) { return; }
  data_ = nullptr;
  wait_for_device(device_);
  detail::backend& be = detail::get_backend();
  if (imported_pool_ != nullptr) {
    // The imported allocation goes back (stream-ordered, as it came), completed before the pool's import goes.
    be.mempool_free_async(std::exchange(base_, nullptr), nullptr);
    try {
      be.stream_synchronize(nullptr);
    } catch (std::exception const& e) {
      std::fprintf(stderr, "gpumem IPC: waiting for the free of an imported pool allocation failed: %s\n", e.what());
    }
    be.mempool_destroy(std::exchange(imported_pool_, nullptr));
  } else if (base_ != nullptr) {
    be.ipc_close_mem_handle(std::exchange(base_, nullptr));
  }
  mapping_.reset();
}

}  // namespace gpumem::ipc

// export_memory and exported_memory (ipc.hpp): the resource's answer turned into a handle; vmm pieces are
// offered at this process's descriptor server until the export is withdrawn.
#include "ipc/descriptor_server.hpp"
#include "ipc/device_identity.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/ipc.hpp>

#include <unistd.h>

#include <memory>
#include <utility>
#include <vector>

namespace gpumem::ipc {

namespace {

/// Offers `descriptors` at this process's server and makes the handle that names them (withdrawn again if
/// the handle cannot be made).
memory_handle offered(memory_handle::fields f, std::vector<std::shared_ptr<mr::owned_fd const>> descriptors)
{
  auto [address, key] = detail::ipc::offer(std::move(descriptors));
  f.server_address = std::move(address);
  f.token = key;
  try {
    return memory_handle{std::move(f)};
  } catch (...) {
    detail::ipc::withdraw(key);
    throw;
  }
}

}  // namespace

exported_memory export_memory(mr::device_memory_resource const& mr, void const* ptr, std::size_t bytes)
{
  mr::shareable_memory shared = mr.shareable(ptr, bytes);
  detail::backend& be = detail::get_backend();
  memory_handle::fields f;
  f.backend = be.kind();
  f.device = shared.device;
  f.pci_bus_id = detail::ipc::pci_bus_id_of(shared.device);
  f.exporter_pid = ::getpid();
  f.bytes = shared.bytes;
  f.offset = shared.offset;
  std::vector<std::shared_ptr<mr::owned_fd const>> descriptors;
  switch (shared.how) {
    case mr::shareable_memory::mechanism::cuda_ipc:
      f.kind = mechanism::cuda_ipc;
      f.cuda_data = shared.cuda_data;
      return exported_memory{memory_handle{std::move(f)}};
    case mr::shareable_memory::mechanism::async_pool:
      f.kind = mechanism::async_pool;
      f.cuda_data = shared.cuda_data;
      descriptors.push_back(std::make_shared<mr::owned_fd const>(std::move(shared.pool_fd)));
      return exported_memory{offered(std::move(f), std::move(descriptors))};
    case mr::shareable_memory::mechanism::vmm_pieces: break;
  }
  f.kind = mechanism::vmm;
  f.granularity = shared.granularity;
  descriptors.reserve(shared.pieces.size());
  for (auto& piece : shared.pieces) {
    f.piece_bytes.push_back(piece.bytes);
    descriptors.push_back(std::move(piece.fd));
  }
  return exported_memory{offered(std::move(f), std::move(descriptors))};
}

exported_memory::exported_memory(exported_memory&& other) noexcept
  : handle_{other.handle_}, active_{std::exchange(other.active_, false)}
{
}

exported_memory& exported_memory::operator=(exported_memory&& other) noexcept
{
  if (this != &other) {
    withdraw();
    handle_ = other.handle_;
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

exported_memory::~exported_memory() { withdraw(); }

void exported_memory::withdraw() noexcept
{
  if (!std::exchange(active_, false)) { return; }
  if (handle_.kind() != mechanism::cuda_ipc) { detail::ipc::withdraw(handle_.contents().token); }
}

}  // namespace gpumem::ipc

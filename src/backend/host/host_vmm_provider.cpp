// The host backend's virtual memory provider (virtual_memory_provider.hpp, "host"): reservations are
// PROT_NONE address space, physical memory is a memfd counted against the emulated device's capacity,
// mapping is mmap(MAP_FIXED | MAP_SHARED) of the memfd.
#include "backend/host/host_capacity.hpp"
#include "backend/vmm_providers.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace gpumem::detail {
namespace {

constexpr std::size_t host_granularity = std::size_t{2} << 20;  // as CUDA's on current GPUs
constexpr char memfd_name[] = "gpumem-vmm";

/// What the handle of a piece records: its size, and whether it is counted against the device (created
/// here) or not (imported: the memory is the exporter's).
struct piece_record {
  std::size_t bytes{};
  bool charged{};
};

/// Whether `fd` is one of the provider's memfds ("/memfd:gpumem-vmm (deleted)" in /proc/self/fd).
bool is_provider_memfd(int fd)
{
  std::string const link = "/proc/self/fd/" + std::to_string(fd);
  char target[256] = {};
  ssize_t const length = ::readlink(link.c_str(), target, sizeof target - 1);
  if (length <= 0) { return false; }
  std::string_view const name{target, static_cast<std::size_t>(length)};
  return name.starts_with(std::string{"/memfd:"} + memfd_name);
}

class host_vmm_provider final : public mr::virtual_memory_provider {
 public:
  explicit host_vmm_provider(int device) : device_{device} {}

  [[nodiscard]] std::string describe() const override { return "host device " + std::to_string(device_); }
  [[nodiscard]] int device() const noexcept override { return device_; }
  [[nodiscard]] std::size_t granularity() const noexcept override { return host_granularity; }
  [[nodiscard]] memory_info mem_info() override { return get_backend().mem_info(device_); }

  [[nodiscard]] std::uintptr_t reserve(std::size_t bytes) override
  {
    check_multiple(bytes, "reserve");
    // Over-reserve by one granule to align the start.
    void* const raw = ::mmap(nullptr, bytes + host_granularity, PROT_NONE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
      throw out_of_memory("host VMM provider: cannot reserve " + format_bytes(bytes) +
                          " of address space: " + std::strerror(errno));
    }
    auto const start = reinterpret_cast<std::uintptr_t>(raw);
    std::uintptr_t const aligned = (start + host_granularity - 1) / host_granularity * host_granularity;
    if (aligned > start) { ::munmap(raw, aligned - start); }
    std::size_t const tail = start + bytes + host_granularity - (aligned + bytes);
    if (tail > 0) { ::munmap(reinterpret_cast<void*>(aligned + bytes), tail); }
    return aligned;
  }

  void unreserve(std::uintptr_t base, std::size_t bytes) noexcept override
  {
    if (::munmap(reinterpret_cast<void*>(base), bytes) != 0) {
      std::fprintf(stderr, "gpumem host VMM provider: munmap(%p, %zu) failed: %s\n", reinterpret_cast<void*>(base),
                   bytes, std::strerror(errno));
    }
  }

  [[nodiscard]] mr::physical_handle create(std::size_t bytes) override
  {
    check_multiple(bytes, "create");
    if (!host_charge_device_memory(device_, bytes)) { return 0; }
    int const fd = ::memfd_create(memfd_name, MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      int const error = errno;
      if (fd >= 0) { ::close(fd); }
      host_uncharge_device_memory(device_, bytes);
      if (error == ENOMEM || error == ENOSPC || error == EMFILE || error == ENFILE) { return 0; }
      throw cuda_error(cudaErrorUnknown, std::string{"host VMM provider: memfd for "} + format_bytes(bytes) +
                       " failed: " + std::strerror(error));
    }
    gpumem::detail::lock_guard lock{mutex_};
    handles_.emplace(static_cast<mr::physical_handle>(fd) + 1, piece_record{bytes, true});  // +1: 0 means none
    return static_cast<mr::physical_handle>(fd) + 1;
  }

  void release(mr::physical_handle handle) noexcept override
  {
    piece_record record;
    {
      gpumem::detail::lock_guard lock{mutex_};
      auto const it = handles_.find(handle);
      if (it == handles_.end()) {
        std::fprintf(stderr, "gpumem host VMM provider: release of unknown handle %llu ignored\n",
                     static_cast<unsigned long long>(handle));
        return;
      }
      record = it->second;
      handles_.erase(it);
    }
    ::close(static_cast<int>(handle - 1));  // the pages go once no mapping (and no export) holds them
    if (record.charged) { host_uncharge_device_memory(device_, record.bytes); }
  }

  void map(std::uintptr_t address, std::size_t bytes, mr::physical_handle handle) override
  {
    check_multiple(bytes, "map");
    void* const mapped = ::mmap(reinterpret_cast<void*>(address), bytes, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_FIXED, static_cast<int>(handle - 1), 0);
    if (mapped == MAP_FAILED) {
      throw cuda_error(cudaErrorInvalidValue, std::string{"host VMM provider: mapping "} + format_bytes(bytes) + " at " +
                       format_pointer(reinterpret_cast<void*>(address)) + " failed: " + std::strerror(errno));
    }
  }

  void unmap(std::uintptr_t address, std::size_t bytes) noexcept override
  {
    // Put reserved, inaccessible address space back (the reservation stays whole).
    if (::mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
               -1, 0) == MAP_FAILED) {
      std::fprintf(stderr, "gpumem host VMM provider: unmapping %p (%zu bytes) failed: %s\n",
                   reinterpret_cast<void*>(address), bytes, std::strerror(errno));
    }
  }
  [[nodiscard]] int export_handle(mr::physical_handle handle) override
  {
    {
      gpumem::detail::lock_guard lock{mutex_};
      expects(handles_.contains(handle), describe() + ": export of unknown handle " + std::to_string(handle));
    }
    int const fd = ::fcntl(static_cast<int>(handle - 1), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      throw cuda_error(cudaErrorUnknown, describe() + ": exporting a piece (dup of its memfd) failed: " +
                                           std::strerror(errno));
    }
    return fd;
  }

  [[nodiscard]] mr::physical_handle import_handle(int fd, std::size_t bytes) override
  {
    check_multiple(bytes, "import");
    struct stat status {};
    expects(fd >= 0 && ::fstat(fd, &status) == 0 && is_provider_memfd(fd),
            describe() + ": file descriptor " + std::to_string(fd) +
              " is not a piece of gpumem's VMM memory (a memfd named " + memfd_name + ")");
    expects(static_cast<std::size_t>(status.st_size) == bytes,
            describe() + ": the piece behind file descriptor " + std::to_string(fd) + " has " +
              format_bytes(static_cast<std::size_t>(status.st_size)) + ", not the " + format_bytes(bytes) +
              " its handle names");
    int const own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
      throw cuda_error(cudaErrorUnknown, describe() + ": importing a piece (dup) failed: " + std::strerror(errno));
    }
    gpumem::detail::lock_guard lock{mutex_};
    handles_.emplace(static_cast<mr::physical_handle>(own) + 1, piece_record{bytes, false});
    return static_cast<mr::physical_handle>(own) + 1;
  }


 private:
  void check_multiple(std::size_t bytes, char const* what) const
  {
    expects(bytes > 0 && bytes % host_granularity == 0,
            std::string{what} + ": " + std::to_string(bytes) + " bytes is not a positive multiple of the granularity " +
              std::to_string(host_granularity));
  }

  int const device_;
  gpumem::detail::mutex mutex_;
  std::map<mr::physical_handle, piece_record> handles_ GPUMEM_GUARDED_BY(mutex_);
};

}  // namespace

std::unique_ptr<mr::virtual_memory_provider> make_host_vmm_provider(int device, std::vector<int> const& peers)
{
  backend& be = get_backend();
  int const count = be.device_count();
  expects(device >= 0 && device < count, "device " + std::to_string(device) + " does not exist (" +
                                           std::to_string(count) + " host devices)");
  for (int const peer : peers) {
    expects(peer >= 0 && peer < count, "peer device " + std::to_string(peer) + " does not exist (" +
                                         std::to_string(count) + " host devices)");
  }
  return std::make_unique<host_vmm_provider>(device);
}

}  // namespace gpumem::detail

// The cuda backend's virtual memory provider (virtual_memory_provider.hpp, "cuda"): the driver's cuMem*
// calls. gpumem does not link libcuda (it must load where no driver is installed), so the entry points are
// looked up through the runtime (cudaGetDriverEntryPointByVersion) when a provider is made.
#include "backend/vmm_providers.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace gpumem::detail {
namespace {

/// The driver functions the provider calls, looked up once per process.
struct driver_calls {
  decltype(&::cuDeviceGetAttribute) device_get_attribute{};
  decltype(&::cuDeviceCanAccessPeer) device_can_access_peer{};
  decltype(&::cuMemGetAllocationGranularity) get_granularity{};
  decltype(&::cuMemAddressReserve) address_reserve{};
  decltype(&::cuMemAddressFree) address_free{};
  decltype(&::cuMemCreate) create{};
  decltype(&::cuMemRelease) release{};
  decltype(&::cuMemMap) map{};
  decltype(&::cuMemSetAccess) set_access{};
  decltype(&::cuMemUnmap) unmap{};
  decltype(&::cuGetErrorString) error_string{};
  decltype(&::cuMemExportToShareableHandle) export_handle{};
  decltype(&::cuMemImportFromShareableHandle) import_handle{};
};

template <class Function>
void look_up(Function& function, char const* symbol)
{
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found{};
  cudaError_t const status = cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || address == nullptr) {
    throw cuda_error(status == cudaSuccess ? cudaErrorSymbolNotFound : status,
                     std::string{"cudaGetDriverEntryPointByVersion(\""} + symbol +
                       "\"): the CUDA driver does not provide it (virtual memory management needs CUDA 12 drivers)");
  }
  function = reinterpret_cast<Function>(address);
}

driver_calls const& driver()
{
  static driver_calls const calls = [] {
    driver_calls c;
    look_up(c.device_get_attribute, "cuDeviceGetAttribute");
    look_up(c.device_can_access_peer, "cuDeviceCanAccessPeer");
    look_up(c.get_granularity, "cuMemGetAllocationGranularity");
    look_up(c.address_reserve, "cuMemAddressReserve");
    look_up(c.address_free, "cuMemAddressFree");
    look_up(c.create, "cuMemCreate");
    look_up(c.release, "cuMemRelease");
    look_up(c.map, "cuMemMap");
    look_up(c.set_access, "cuMemSetAccess");
    look_up(c.unmap, "cuMemUnmap");
    look_up(c.error_string, "cuGetErrorString");
    look_up(c.export_handle, "cuMemExportToShareableHandle");
    look_up(c.import_handle, "cuMemImportFromShareableHandle");
    return c;
  }();
  return calls;
}

std::string result_text(CUresult result)
{
  char const* text = nullptr;
  if (driver().error_string == nullptr || driver().error_string(result, &text) != CUDA_SUCCESS || text == nullptr) {
    return "CUresult " + std::to_string(static_cast<int>(result));
  }
  return std::string{text} + " (CUresult " + std::to_string(static_cast<int>(result)) + ")";
}

/// Driver and runtime codes agree for the errors these calls return (2: out of memory, 1: invalid value...).
[[noreturn]] void throw_driver_error(CUresult result, std::string const& call)
{
  throw cuda_error(static_cast<cudaError_t>(result), call + " failed: " + result_text(result));
}

void check(CUresult result, std::string const& call)
{
  if (result != CUDA_SUCCESS) { throw_driver_error(result, call); }
}

class cuda_vmm_provider final : public mr::virtual_memory_provider {
 public:
  cuda_vmm_provider(int device, std::vector<int> const& peers, bool shareable) : device_{device}
  {
    properties_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    properties_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    properties_.location.id = device;
    if (shareable) { properties_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; }
    check(driver().get_granularity(&granularity_, &properties_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity(device " + std::to_string(device) + ")");
    access_.push_back(read_write(device));
    for (int const peer : peers) {
      if (peer != device) { access_.push_back(read_write(peer)); }
    }
  }

  [[nodiscard]] std::string describe() const override { return "cuda device " + std::to_string(device_); }
  [[nodiscard]] int device() const noexcept override { return device_; }
  [[nodiscard]] std::size_t granularity() const noexcept override { return granularity_; }
  [[nodiscard]] memory_info mem_info() override { return get_backend().mem_info(device_); }

  [[nodiscard]] std::uintptr_t reserve(std::size_t bytes) override
  {
    CUdeviceptr base = 0;
    CUresult const result = driver().address_reserve(&base, bytes, granularity_, 0, 0);
    if (result == CUDA_ERROR_OUT_OF_MEMORY) {
      throw out_of_memory("cuMemAddressReserve of " + format_bytes(bytes) + " on " + describe() + ": " +
                          result_text(result));
    }
    check(result, "cuMemAddressReserve(" + format_bytes(bytes) + ")");
    return static_cast<std::uintptr_t>(base);
  }

  void unreserve(std::uintptr_t base, std::size_t bytes) noexcept override
  {
    report(driver().address_free(static_cast<CUdeviceptr>(base), bytes), "cuMemAddressFree");
  }

  [[nodiscard]] mr::physical_handle create(std::size_t bytes) override
  {
    CUmemGenericAllocationHandle handle = 0;
    CUresult const result = driver().create(&handle, bytes, &properties_, 0);
    if (result == CUDA_ERROR_OUT_OF_MEMORY) { return 0; }
    check(result, "cuMemCreate(" + format_bytes(bytes) + ", " + describe() + ")");
    return static_cast<mr::physical_handle>(handle);
  }

  void release(mr::physical_handle handle) noexcept override
  {
    report(driver().release(static_cast<CUmemGenericAllocationHandle>(handle)), "cuMemRelease");
  }

  void map(std::uintptr_t address, std::size_t bytes, mr::physical_handle handle) override
  {
    auto const where = static_cast<CUdeviceptr>(address);
    check(driver().map(where, bytes, 0, static_cast<CUmemGenericAllocationHandle>(handle), 0),
          "cuMemMap(" + format_pointer(reinterpret_cast<void*>(address)) + ", " + format_bytes(bytes) + ")");
    CUresult const result = driver().set_access(where, bytes, access_.data(), access_.size());
    if (result != CUDA_SUCCESS) {
      report(driver().unmap(where, bytes), "cuMemUnmap");
      throw_driver_error(result, "cuMemSetAccess(" + format_pointer(reinterpret_cast<void*>(address)) + ", " +
                                   format_bytes(bytes) + ")");
    }
  }

  void unmap(std::uintptr_t address, std::size_t bytes) noexcept override
  {
    report(driver().unmap(static_cast<CUdeviceptr>(address), bytes), "cuMemUnmap");
  }

  [[nodiscard]] int export_handle(mr::physical_handle handle) override
  {
    expects(properties_.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            describe() + " cannot share its memory: the device has no POSIX file descriptor handles "
                         "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0)");
    int fd = -1;
    check(driver().export_handle(&fd, static_cast<CUmemGenericAllocationHandle>(handle),
                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          "cuMemExportToShareableHandle(" + describe() + ")");
    return fd;
  }

  [[nodiscard]] mr::physical_handle import_handle(int fd, std::size_t bytes) override
  {
    expects(fd >= 0, describe() + ": import of file descriptor " + std::to_string(fd));
    CUmemGenericAllocationHandle handle = 0;
    // The driver takes the descriptor's number as the pointer's value (CUDA's documented convention).
    CUresult const result = driver().import_handle(
      &handle, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (result != CUDA_SUCCESS) {
      throw_driver_error(result, "cuMemImportFromShareableHandle(file descriptor " + std::to_string(fd) + ", " +
                                   format_bytes(bytes) + ", " + describe() +
                                   "): not a piece of VMM memory this driver can import");
    }
    return static_cast<mr::physical_handle>(handle);
  }

 private:
  static CUmemAccessDesc read_write(int device)
  {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access;
  }

  static void report(CUresult result, char const* call) noexcept
  {
    if (result != CUDA_SUCCESS) {
      std::fprintf(stderr, "gpumem cuda VMM provider: %s failed: CUresult %d\n", call, static_cast<int>(result));
    }
  }

  int const device_;
  CUmemAllocationProp properties_{};
  std::size_t granularity_{};
  std::vector<CUmemAccessDesc> access_;
};

}  // namespace

std::unique_ptr<mr::virtual_memory_provider> make_cuda_vmm_provider(int device, std::vector<int> const& peers)
{
  backend& be = get_backend();
  int const count = be.device_count();
  expects(device >= 0 && device < count,
          "device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " CUDA devices)");
  be.set_current_device(be.current_device());  // makes the runtime's context current on this thread
  driver_calls const& calls = driver();
  auto attribute = [&](CUdevice_attribute which, int dev) {
    int value = 0;
    check(calls.device_get_attribute(&value, which, static_cast<CUdevice>(dev)), "cuDeviceGetAttribute");
    return value;
  };
  expects(attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) != 0,
          "device " + std::to_string(device) + " (" + be.properties(device).name +
            ") does not support CUDA virtual memory management (cuMemCreate/cuMemMap); use pool_memory_resource");
  for (int const peer : peers) {
    expects(peer >= 0 && peer < count,
            "peer device " + std::to_string(peer) + " does not exist (" + std::to_string(count) + " CUDA devices)");
    if (peer == device) { continue; }
    int can = 0;
    check(calls.device_can_access_peer(&can, static_cast<CUdevice>(peer), static_cast<CUdevice>(device)),
          "cuDeviceCanAccessPeer");
    expects(can != 0, "peer device " + std::to_string(peer) + " cannot access the memory of device " +
                        std::to_string(device));
  }
  bool const shareable = attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device) != 0;
  return std::make_unique<cuda_vmm_provider>(device, peers, shareable);
}

}  // namespace gpumem::detail

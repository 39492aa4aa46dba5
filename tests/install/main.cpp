// Consumer of an installed gpumem (tests/install): allocates through the current device resource, writes
// and reads the memory back through the backend, and prints one line that run_install_test.cmake checks.
#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main()
{
  try {
    constexpr std::size_t bytes = std::size_t{1} << 20;
    auto& backend = gpumem::detail::get_backend();
    auto* mr = gpumem::mr::get_current_device_resource();
    gpumem::cuda_stream_view const stream = gpumem::cuda_stream_default;

    void* ptr = mr->allocate(bytes, stream);
    backend.memset_async(ptr, 0x5a, bytes, stream);
    std::vector<unsigned char> host(bytes);
    backend.memcpy_async(host.data(), ptr, bytes, stream);
    backend.stream_synchronize(stream);
    mr->deallocate(ptr, bytes, stream);

    for (unsigned char const byte : host) {
      if (byte != 0x5a) {
        std::fprintf(stderr, "consumer: memory read back wrong\n");
        return 1;
      }
    }
    std::printf("consumer: gpumem %s, %s backend, allocated, filled and freed %zu bytes\n", CONSUMER_GPUMEM_VERSION,
                std::string{gpumem::to_string(backend.kind())}.c_str(), bytes);
    return 0;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "consumer: error: %s\n", e.what());
    return 1;
  }
}

// load_cublas (cublas_library.hpp).
#include "cublas_library.hpp"

#include <gpumem/error.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace gpumem::detail {

cublas_library const& load_cublas()
{
  static std::mutex mutex;
  static cublas_library library;  // set once, then only read
  std::lock_guard const lock{mutex};
  if (library.create != nullptr) { return library; }
  std::string const versioned = "libcublas.so." + std::to_string(CUDART_VERSION / 1000);
  std::string reasons;
  for (std::string const& name : {versioned, std::string{"libcublas.so"}}) {
    void* const handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      char const* const why = dlerror();
      reasons += "; " + name + ": " + (why != nullptr ? why : "not found");
      continue;
    }
    auto* const create = dlsym(handle, "cublasCreate_v2");
    auto* const destroy = dlsym(handle, "cublasDestroy_v2");
    if (create == nullptr || destroy == nullptr) {
      reasons += "; " + name + ": no cublasCreate_v2/cublasDestroy_v2";
      dlclose(handle);
      continue;
    }
    // The handle stays open for the life of the process: handles made through it may live until exit.
    library.create = reinterpret_cast<cublas_library::create_fn>(create);     // NOLINT: dlsym's documented use
    library.destroy = reinterpret_cast<cublas_library::destroy_fn>(destroy);  // NOLINT
    return library;
  }
  throw cuda_error(cudaErrorNotSupported, "cuBLAS could not be loaded (it comes with the CUDA toolkit; put its "
                                          "lib64 on LD_LIBRARY_PATH)" + reasons);
}

}  // namespace gpumem::detail

// `gpumem info`: what the process runs on. Every value comes from the library (device.hpp, backend.hpp).
#include "commands.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>

#include <CLI/CLI.hpp>

#include <ostream>
#include <string>

namespace gpumem::cli {
namespace {

/// CUDA's version encoding (1000 * major + 10 * minor) as "13.0 (13000)".
std::string format_cuda_version(int version)
{
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10) + " (" +
         std::to_string(version) + ")";
}

char const* yes_no(bool value) { return value ? "yes" : "no"; }

int run_info(std::ostream& out)
{
  backend_kind const kind = current_backend_kind();
  int const driver = driver_version();
  int const count = get_num_cuda_devices();
  out << "gpumem " << GPUMEM_VERSION_STRING << '\n'
      << "backend:          " << to_string(kind) << '\n'
      << "runtime version:  " << format_cuda_version(runtime_version()) << '\n'
      << "driver version:   " << (driver == 0 ? std::string{"none (no CUDA driver in use)"} : format_cuda_version(driver)) << '\n'
      << "devices:          " << count << '\n';

  for (int id = 0; id < count; ++id) {
    cuda_device_id const device{id};
    device_properties const props = get_device_properties(device);
    memory_info const memory = available_device_memory(device);
    out << "device " << id << ": " << props.name << '\n'
        << "  compute capability:   " << props.compute_capability_major << '.' << props.compute_capability_minor
        << '\n'
        << "  multiprocessors:      " << props.multiprocessor_count << '\n'
        << "  total memory:         " << format_bytes(props.total_memory) << '\n'
        << "  free memory:          " << format_bytes(memory.free) << " of " << format_bytes(memory.total) << '\n'
        << "  memory pools:         " << yes_no(props.memory_pools_supported) << '\n'
        << "  managed memory:       " << yes_no(props.managed_memory_supported)
        << " (concurrent access: " << yes_no(props.concurrent_managed_access) << ")\n"
        << "  PCI bus id:           " << (props.pci_bus_id.empty() ? std::string{"-"} : props.pci_bus_id) << '\n';
  }
  return 0;
}

}  // namespace

command add_info(CLI::App& gpumem)
{
  CLI::App* const parser =
    gpumem.add_subcommand("info", "backend, CUDA runtime and driver versions, devices and their memory");
  return {parser, [](std::string const&, std::ostream& out) { return run_info(out); }};
}

}  // namespace gpumem::cli

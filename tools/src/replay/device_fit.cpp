// device_fit.hpp: a log's peak against the device's memory.
#include <gpumem/replay/device_fit.hpp>

#include "report/report_format.hpp"

#include <gpumem/device.hpp>

namespace gpumem {

std::optional<std::string> peak_above_device_note(std::size_t peak_live_bytes, std::size_t device_bytes,
                                                  std::size_t failures)
{
  if (peak_live_bytes <= device_bytes) { return std::nullopt; }
  return "the log's peak live bytes (" + detail::short_bytes(static_cast<double>(peak_live_bytes)) +
         ") are more than the device's memory (" + detail::short_bytes(static_cast<double>(device_bytes)) + "): " +
         std::to_string(failures) + (failures == 1 ? " allocation" : " allocations") +
         " failed, so the figures are not those of the log; with --simulate, the sub-allocators run over a "
         "simulated upstream of any size";
}

std::size_t current_device_memory_bytes() { return available_device_memory().total; }

}  // namespace gpumem

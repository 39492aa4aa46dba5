// Test helper: a virtual memory provider that forwards to a simulated_vmm_provider the test owns, so that the
// test can read its counters after the pool (which owns its provider) is gone.
#pragma once

#include <gpumem/backend/virtual_memory_provider.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gpumem::test {

/// See the file comment.
class borrowed_provider final : public mr::virtual_memory_provider {
 public:
  explicit borrowed_provider(mr::simulated_vmm_provider& inner) : inner_{inner} {}
  [[nodiscard]] std::string describe() const override { return inner_.describe(); }
  [[nodiscard]] int device() const noexcept override { return inner_.device(); }
  [[nodiscard]] std::size_t granularity() const noexcept override { return inner_.granularity(); }
  [[nodiscard]] memory_info mem_info() override { return inner_.mem_info(); }
  [[nodiscard]] std::uintptr_t reserve(std::size_t bytes) override { return inner_.reserve(bytes); }
  void unreserve(std::uintptr_t base, std::size_t bytes) noexcept override { inner_.unreserve(base, bytes); }
  [[nodiscard]] mr::physical_handle create(std::size_t bytes) override { return inner_.create(bytes); }
  void release(mr::physical_handle handle) noexcept override { inner_.release(handle); }
  void map(std::uintptr_t address, std::size_t bytes, mr::physical_handle handle) override
  {
    inner_.map(address, bytes, handle);
  }
  void unmap(std::uintptr_t address, std::size_t bytes) noexcept override { inner_.unmap(address, bytes); }

 private:
  mr::simulated_vmm_provider& inner_;
};

inline std::unique_ptr<mr::virtual_memory_provider> borrow(mr::simulated_vmm_provider& provider)
{
  return std::make_unique<borrowed_provider>(provider);
}

}  // namespace gpumem::test

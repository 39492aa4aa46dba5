// The adaptors' checks (adaptor_checks.hpp): one adapted_resource per adaptor with state to check.

#include "adaptor_checks.hpp"

#include <gpumem/mr/failure_callback_resource_adaptor.hpp>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

namespace gpumem::bench {
namespace {

namespace fs = std::filesystem;

[[nodiscard]] std::string str(std::size_t n) { return std::to_string(n); }

/**
 * @brief logging: after a flush, the file holds the header, then one `allocate` and one `free` row per
 * allocation of the usage record, and nothing else. The file is read on from where the last check stopped,
 * and deleted with the adaptor.
 */
class logging_adapted final : public adapted_resource {
 public:
  logging_adapted(resource_handle chain, mr::logging_resource_adaptor* log, fs::path file)
    : adapted_resource{std::move(chain)}, log_{log}, file_{std::move(file)}
  {
  }
  ~logging_adapted() override
  {
    chain_.reset();  // the adaptor writes out and closes its file first
    std::error_code ignored;
    fs::remove(file_, ignored);
  }
  logging_adapted(logging_adapted const&) = delete;
  logging_adapted& operator=(logging_adapted const&) = delete;
  logging_adapted(logging_adapted&&) = delete;
  logging_adapted& operator=(logging_adapted&&) = delete;

  [[nodiscard]] std::string check_idle(usage_record const& usage) override
  {
    log_->flush();
    std::ifstream in{file_, std::ios::binary};
    if (!in) { return "logging: cannot read its file " + file_.string(); }
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string line;
    while (std::getline(in, line) && !in.eof()) {  // eof: a last line without its '\n' is not complete
      offset_ += line.size() + 1;
      if (!header_seen_) {
        if (line != mr::logging_resource_adaptor::header()) {
          return "logging: the first line is not the header: " + line;
        }
        header_seen_ = true;
        continue;
      }
      std::size_t const first = line.find(',');
      std::size_t const second = first == std::string::npos ? first : line.find(',', first + 1);
      std::size_t const third = second == std::string::npos ? second : line.find(',', second + 1);
      std::string_view const action = third == std::string::npos
                                        ? std::string_view{}
                                        : std::string_view{line}.substr(second + 1, third - second - 1);
      if (action == "allocate") {
        ++allocate_rows_;
      } else if (action == "free") {
        ++free_rows_;
      } else {
        ++other_rows_;
      }
    }
    if (!header_seen_ || allocate_rows_ != usage.allocations || free_rows_ != usage.allocations || other_rows_ != 0) {
      return "logging: after " + str(usage.allocations) + " allocations and as many frees its file " +
             file_.string() + " holds " + (header_seen_ ? "the header, " : "no header, ") + str(allocate_rows_) +
             " allocate rows, " + str(free_rows_) + " free rows and " + str(other_rows_) +
             " other rows (expected the header and one row per operation)";
    }
    return {};
  }

 private:
  mr::logging_resource_adaptor* log_;
  fs::path file_;
  std::size_t offset_{0};  // bytes of the file already counted (whole lines)
  bool header_seen_{false};
  std::size_t allocate_rows_{0};
  std::size_t free_rows_{0};
  std::size_t other_rows_{0};
};

/** @brief statistics: its counters agree with the usage record, live and at rest. */
class statistics_adapted final : public adapted_resource {
 public:
  statistics_adapted(resource_handle chain, mr::statistics_resource_adaptor* stats)
    : adapted_resource{std::move(chain)}, stats_{stats}
  {
  }

  [[nodiscard]] std::string check_live(std::size_t blocks, std::size_t bytes) override
  {
    auto const c = stats_->get_counters();
    if (c.allocations.current != static_cast<std::int64_t>(blocks) ||
        c.bytes.current != static_cast<std::int64_t>(blocks * bytes)) {
      return "statistics: with " + str(blocks) + " blocks of " + str(bytes) + " B live it counts " +
             std::to_string(c.allocations.current) + " allocations and " + std::to_string(c.bytes.current) + " B";
    }
    return {};
  }

  [[nodiscard]] std::string check_idle(usage_record const& usage) override
  {
    auto const c = stats_->get_counters();
    auto const i64 = [](std::size_t n) { return static_cast<std::int64_t>(n); };
    if (c.allocations.total != i64(usage.allocations) || c.bytes.total != i64(usage.bytes) ||
        c.allocations.current != 0 || c.bytes.current != 0 || c.bytes.peak < i64(usage.peak_bytes_min) ||
        c.bytes.peak > i64(usage.peak_bytes_max)) {
      return "statistics: after " + str(usage.allocations) + " allocations of " + str(usage.bytes) +
             " B in all (live peak " + str(usage.peak_bytes_min) + ".." + str(usage.peak_bytes_max) +
             " B), all freed, it counts allocations total/current " + std::to_string(c.allocations.total) + "/" +
             std::to_string(c.allocations.current) + ", bytes total/current/peak " + std::to_string(c.bytes.total) +
             "/" + std::to_string(c.bytes.current) + "/" + std::to_string(c.bytes.peak);
    }
    return {};
  }

 private:
  mr::statistics_resource_adaptor* stats_;
};

/** @brief tracking: it knows exactly the live blocks (with their stacks when asked), and none at rest. */
class tracking_adapted final : public adapted_resource {
 public:
  tracking_adapted(resource_handle chain, mr::tracking_resource_adaptor* tracker)
    : adapted_resource{std::move(chain)}, tracker_{tracker}
  {
  }

  [[nodiscard]] std::string check_live(std::size_t blocks, std::size_t bytes) override
  {
    if (tracker_->outstanding_count() != blocks || tracker_->allocated_bytes() != blocks * bytes) {
      return "tracking: with " + str(blocks) + " blocks of " + str(bytes) + " B live it tracks " +
             str(tracker_->outstanding_count()) + " allocations of " + str(tracker_->allocated_bytes()) + " B";
    }
#if __has_include(<execinfo.h>)  // where the adaptor can capture stacks (tracking_resource_adaptor.cpp)
    if (tracker_->captures_stacks()) {
      for (auto const& [ptr, info] : tracker_->outstanding_allocations()) {
        if (info.stack.empty()) { return "tracking: no call stack was captured for a live block"; }
      }
    }
#endif
    return {};
  }

  [[nodiscard]] std::string check_idle(usage_record const& /*usage*/) override
  {
    if (tracker_->outstanding_count() != 0 || tracker_->allocated_bytes() != 0 ||
        tracker_->invalid_deallocations() != 0) {
      return "tracking: with everything freed it still tracks " + str(tracker_->outstanding_count()) +
             " allocations of " + str(tracker_->allocated_bytes()) + " B, and counts " +
             str(tracker_->invalid_deallocations()) + " invalid deallocations";
    }
    return {};
  }

 private:
  mr::tracking_resource_adaptor* tracker_;
};

/** @brief limiting: it counts the live blocks, rounded up, and is back to 0 at rest. */
class limiting_adapted final : public adapted_resource {
 public:
  limiting_adapted(resource_handle chain, mr::limiting_resource_adaptor* limiter)
    : adapted_resource{std::move(chain)}, limiter_{limiter}
  {
  }

  [[nodiscard]] std::string check_live(std::size_t blocks, std::size_t bytes) override
  {
    std::size_t const a = limiter_->alignment();
    std::size_t const expected = blocks * ((bytes + a - 1) / a * a);
    if (limiter_->get_allocated_bytes() != expected) {
      return "limiting: with " + str(blocks) + " blocks of " + str(bytes) + " B live it counts " +
             str(limiter_->get_allocated_bytes()) + " B, expected " + str(expected);
    }
    return {};
  }

  [[nodiscard]] std::string check_idle(usage_record const& /*usage*/) override
  {
    if (limiter_->get_allocated_bytes() != 0) {
      return "limiting: with everything freed it still counts " + str(limiter_->get_allocated_bytes()) + " B";
    }
    return {};
  }

 private:
  mr::limiting_resource_adaptor* limiter_;
};

/** @brief failure_callback: the callback (which counts its calls) never fired: the base never ran out. */
class failure_callback_adapted final : public adapted_resource {
 public:
  explicit failure_callback_adapted(resource_handle chain) : adapted_resource{std::move(chain)}
  {
    mr::device_memory_resource* const below = &chain_.get();
    chain_.emplace<mr::failure_callback_resource_adaptor>(
      below,
      [](std::size_t, void* arg) {
        static_cast<std::atomic<std::size_t>*>(arg)->fetch_add(1);
        return false;  // let the allocation fail: it would be a real out-of-memory
      },
      &calls_);
  }
  ~failure_callback_adapted() override { chain_.reset(); }  // the adaptor holds &calls_
  failure_callback_adapted(failure_callback_adapted const&) = delete;
  failure_callback_adapted& operator=(failure_callback_adapted const&) = delete;
  failure_callback_adapted(failure_callback_adapted&&) = delete;
  failure_callback_adapted& operator=(failure_callback_adapted&&) = delete;

  [[nodiscard]] std::string check_idle(usage_record const& /*usage*/) override
  {
    if (std::size_t const calls = calls_.load(); calls != 0) {
      return "failure_callback: the callback fired " + str(calls) + " times (the base ran out of memory)";
    }
    return {};
  }

 private:
  std::atomic<std::size_t> calls_{0};
};

/** @brief aligned: every block at or above the threshold has the adaptor's alignment. */
class aligned_adapted final : public adapted_resource {
 public:
  aligned_adapted(resource_handle chain, mr::aligned_resource_adaptor const* aligner)
    : adapted_resource{std::move(chain)}, alignment_{aligner->alignment()}, threshold_{aligner->alignment_threshold()}
  {
  }

  [[nodiscard]] std::string check_block(void const* ptr, std::size_t bytes) const override
  {
    if (bytes >= threshold_ && reinterpret_cast<std::uintptr_t>(ptr) % alignment_ != 0) {
      return "aligned: a block of " + str(bytes) + " B is not " + str(alignment_) + "-byte aligned";
    }
    return {};
  }

 private:
  std::size_t alignment_;
  std::size_t threshold_;
};

}  // namespace

std::unique_ptr<adapted_resource> check_logging(resource_handle chain, mr::logging_resource_adaptor* log,
                                                std::filesystem::path file)
{
  return std::make_unique<logging_adapted>(std::move(chain), log, std::move(file));
}

std::unique_ptr<adapted_resource> check_statistics(resource_handle chain, mr::statistics_resource_adaptor* stats)
{
  return std::make_unique<statistics_adapted>(std::move(chain), stats);
}

std::unique_ptr<adapted_resource> check_tracking(resource_handle chain, mr::tracking_resource_adaptor* tracker)
{
  return std::make_unique<tracking_adapted>(std::move(chain), tracker);
}

std::unique_ptr<adapted_resource> check_limiting(resource_handle chain, mr::limiting_resource_adaptor* limiter)
{
  return std::make_unique<limiting_adapted>(std::move(chain), limiter);
}

std::unique_ptr<adapted_resource> check_aligned(resource_handle chain, mr::aligned_resource_adaptor const* aligner)
{
  return std::make_unique<aligned_adapted>(std::move(chain), aligner);
}

std::unique_ptr<adapted_resource> with_counting_failure_callback(resource_handle base)
{
  return std::make_unique<failure_callback_adapted>(std::move(base));
}

void* checked_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* const ptr = adapted_.get().allocate(bytes, stream);
  if (std::string const error = adapted_.check_block(ptr, bytes); !error.empty()) {
    adapted_.get().deallocate(ptr, bytes, stream);
    throw std::runtime_error(error);
  }
  return ptr;
}

void checked_resource::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  adapted_.get().deallocate(ptr, bytes, stream);
}

bool checked_resource::do_is_equal(mr::device_memory_resource const& other) const noexcept { return this == &other; }

}  // namespace gpumem::bench

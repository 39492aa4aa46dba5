// A progress bar for long runs (replays of big logs): one line on stderr, redrawn in place, with the
// fraction done, a bar, the elapsed time and an estimate of the time left. Drawn only when stderr is a
// terminal (so logs, pipes and tests see nothing), at most ten times a second.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace gpumem::cli {

class progress_bar {
 public:
  /** @param label what is running, e.g. "resnet50.csv on pool". */
  explicit progress_bar(std::string label);
  ~progress_bar();
  progress_bar(progress_bar const&) = delete;
  progress_bar& operator=(progress_bar const&) = delete;

  /** @brief Draws the bar at `fraction` (0..1) if enough time passed since the last draw (always at 1). */
  void update(double fraction);

  /** @brief Erases the line, so that what follows on the terminal starts clean. Never throws. */
  void clear() noexcept;

  /** @return a callback for replay_options::progress that updates this bar; empty when not drawing. */
  [[nodiscard]] std::function<void(double)> callback();

 private:
  std::string label_;
  bool enabled_;
  bool drawn_{false};
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace gpumem::cli

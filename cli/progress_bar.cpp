// progress_bar.hpp: drawing the bar.
#include "progress_bar.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include <unistd.h>

namespace gpumem::cli {

namespace {
constexpr int bar_width = 30;
constexpr auto redraw_interval = std::chrono::milliseconds{100};

/// Seconds as "7s", "3m05s" or "1h02m".
std::string format_duration(double seconds)
{
  auto const s = static_cast<long>(std::max(seconds, 0.0) + 0.5);
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof text, "%lds", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s / 60 % 60);
  }
  return text;
}
}  // namespace

progress_bar::progress_bar(std::string label)
  : label_{std::move(label)}, enabled_{::isatty(STDERR_FILENO) == 1}, start_{std::chrono::steady_clock::now()}
{
}

progress_bar::~progress_bar() { clear(); }

void progress_bar::update(double fraction)
{
  if (!enabled_) { return; }
  fraction = std::clamp(fraction, 0.0, 1.0);
  auto const now = std::chrono::steady_clock::now();
  if (drawn_ && fraction < 1.0 && now - last_draw_ < redraw_interval) { return; }
  last_draw_ = now;
  double const elapsed = std::chrono::duration<double>(now - start_).count();
  int const filled = static_cast<int>(fraction * bar_width);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(bar_width - filled), '.');
  std::string timing = format_duration(elapsed);
  if (fraction > 0.0 && fraction < 1.0) { timing += ", " + format_duration(elapsed / fraction - elapsed) + " left"; }
  std::fprintf(stderr, "\r\033[K  %s [%s] %3d%%  %s", label_.c_str(), bar.c_str(), static_cast<int>(fraction * 100.0),
               timing.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void progress_bar::clear() noexcept
{
  if (drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
  drawn_ = false;
}

std::function<void(double)> progress_bar::callback()
{
  if (!enabled_) { return {}; }
  return [this](double fraction) { update(fraction); };
}

}  // namespace gpumem::cli

// crash_flush (crash_flush.hpp): a fixed table of atomic pointers, which a signal handler can read without a
// lock, and the handlers that write the files' waiting rows before the signal goes on.
#include "mr/logging/crash_flush.hpp"

#include "mr/logging/log_file.hpp"

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>

namespace gpumem::detail {
namespace {

constexpr std::size_t max_files = 64;
std::array<std::atomic<log_file*>, max_files> registered_files{};  // null: a free entry

constexpr std::array handled_signals{SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTERM, SIGINT, SIGHUP, SIGQUIT};
std::array<struct sigaction, NSIG> previous_actions{};  // written before the handler is installed

void flush_all() noexcept
{
  for (auto& entry : registered_files) {
    if (log_file* const file = entry.load()) { file->flush(); }
  }
}

void flush_all_from_signal() noexcept
{
  for (auto& entry : registered_files) {
    if (log_file* const file = entry.load()) { (void)file->flush_from_signal(); }
  }
}

/// Hands the signal on to what was installed before: a handler is called; the default action is restored
/// and the signal raised again, which (blocked while this handler runs) takes effect when it returns.
void pass_on(int signal, siginfo_t* info, void* context) noexcept
{
  struct sigaction const& previous = previous_actions[static_cast<std::size_t>(signal)];
  if ((previous.sa_flags & SA_SIGINFO) != 0) {
    if (previous.sa_sigaction != nullptr) { previous.sa_sigaction(signal, info, context); }
    return;
  }
  if (previous.sa_handler == SIG_DFL) {
    (void)::sigaction(signal, &previous, nullptr);
    (void)::raise(signal);
    return;
  }
  if (previous.sa_handler != SIG_IGN) { previous.sa_handler(signal); }
}

void on_signal(int signal, siginfo_t* info, void* context) noexcept
{
  int const saved_errno = errno;
  flush_all_from_signal();
  errno = saved_errno;
  pass_on(signal, info, context);
}

void install_once() noexcept
{
  static bool const installed = [] {
    (void)std::atexit(flush_all);
    (void)std::at_quick_exit(flush_all);
    for (int const signal : handled_signals) {
      struct sigaction current{};
      if (::sigaction(signal, nullptr, &current) != 0) { continue; }
      if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_IGN) { continue; }  // stays ignored
      previous_actions[static_cast<std::size_t>(signal)] = current;
      struct sigaction mine{};
      mine.sa_sigaction = on_signal;
      mine.sa_flags = SA_SIGINFO | SA_ONSTACK;
      sigemptyset(&mine.sa_mask);
      (void)::sigaction(signal, &mine, nullptr);
    }
    return true;
  }();
  (void)installed;
}

}  // namespace

void register_for_crash_flush(log_file* file) noexcept
{
  install_once();
  for (auto& entry : registered_files) {
    log_file* expected = nullptr;
    if (entry.compare_exchange_strong(expected, file)) { return; }
  }
}

void unregister_for_crash_flush(log_file* file) noexcept
{
  for (auto& entry : registered_files) {
    log_file* expected = file;
    if (entry.compare_exchange_strong(expected, nullptr)) { return; }
  }
}

}  // namespace gpumem::detail

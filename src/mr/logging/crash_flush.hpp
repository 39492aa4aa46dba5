// crash_flush: the log files whose waiting rows are written when the process ends without destroying them:
// at exit() and quick_exit(), and on a signal whose default action ends the process (SIGABRT, SIGBUS,
// SIGFPE, SIGILL, SIGSEGV, SIGTERM, SIGINT, SIGHUP, SIGQUIT). The handlers are installed with the first log
// file; each writes the rows, then hands the signal on to what was installed before it (another handler,
// or the default action, which then ends the process). A signal that was ignored stays ignored.
#pragma once

namespace gpumem::detail {

class log_file;

/**
 * @brief Adds `file` to the files flushed at exit and on fatal signals; installs the handlers once.
 * Up to 64 files at once: a further one relies on its writer alone (log_file.hpp).
 */
void register_for_crash_flush(log_file* file) noexcept;

/** @brief Removes `file` (before it is destroyed). */
void unregister_for_crash_flush(log_file* file) noexcept;

}  // namespace gpumem::detail

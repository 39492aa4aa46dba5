/**
 * @file staged_file.hpp
 * A file written whole or not at all: the text goes to a temporary file in the destination's folder, which
 * commit() renames over the destination, so that a write failing part way (a full disk, a killed process)
 * leaves whatever was there before untouched. Creating it checks at once that the destination's folder
 * exists and can be written, so that a tool can fail before its long work rather than after it.
 *
 * A destination that exists and is not a regular file (a terminal, a pipe, /dev/stdout) cannot be replaced:
 * it is written directly. A symbolic link is followed: the file it points to is replaced, the link stays.
 */
#pragma once

#include <gpumem/export.hpp>

#include <filesystem>
#include <string_view>

namespace gpumem {

/**
 * @brief One file being written. Movable, not copyable. The temporary file is removed if the object is
 * destroyed before commit().
 * Thread-safety: one thread at a time.
 */
class GPUMEM_EXPORT staged_file {
 public:
  /**
   * @brief Creates the temporary file beside `destination` (named `.NAME.tmp-PID-N`), with the permissions
   * of the file it will replace, or the usual ones for a new file.
   * @throws gpumem::logic_error naming `destination` and the reason when it cannot be created (no such
   *         folder, no permission, a read-only file system).
   */
  explicit staged_file(std::filesystem::path destination);
  ~staged_file();
  staged_file(staged_file&&) noexcept;
  staged_file& operator=(staged_file&&) noexcept;
  staged_file(staged_file const&) = delete;
  staged_file& operator=(staged_file const&) = delete;

  /**
   * @brief Appends `text`. @pre not committed.
   * @throws gpumem::logic_error naming the destination when the write fails (the destination is untouched).
   */
  void write(std::string_view text);

  /**
   * @brief Flushes the text to the disk and renames the temporary file over the destination.
   * @pre not committed.
   * @throws gpumem::logic_error naming the destination when that fails (the destination is untouched).
   */
  void commit();

  /** @return the file that commit() replaces. */
  [[nodiscard]] std::filesystem::path const& destination() const noexcept { return destination_; }

 private:
  void discard() noexcept;

  std::filesystem::path destination_;  // as given
  std::filesystem::path target_;       // what is replaced (a link followed); empty when written directly
  std::filesystem::path temporary_;    // empty when written directly
  int fd_{-1};
};

}  // namespace gpumem

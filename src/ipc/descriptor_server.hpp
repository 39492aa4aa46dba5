// How an exporting process hands file descriptors to importers: one thread per process serves an abstract
// Unix socket (SOCK_SEQPACKET); an importer connects, sends the 16-byte token of an export, and receives
// that export's descriptors (SCM_RIGHTS, in batches) or a refusal. Peers of another user are refused
// (SO_PEERCRED), and a peer that stops talking is dropped after a timeout, so no importer can hold the
// server up.
#pragma once

#include <gpumem/mr/shareable_memory.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gpumem::detail::ipc {

using token = std::array<unsigned char, 16>;

/**
 * @brief Registers `descriptors` under a new random token and starts the process's server if it is not
 * running (again after a fork: a child serves its own exports).
 * @return the server's address (an abstract socket name, without the leading NUL) and the token.
 * @throws gpumem::cuda_error (cudaErrorUnknown) naming the system call when the server cannot start.
 */
[[nodiscard]] std::pair<std::string, token> offer(std::vector<std::shared_ptr<mr::owned_fd const>> descriptors);

/** @brief Forgets the export of `key`, closing its descriptors; later requests for it are refused. */
void withdraw(token const& key) noexcept;

/**
 * @brief Asks the server at `address` for the descriptors of `key`.
 * @return exactly `expected` descriptors, owned by the caller.
 * @throws gpumem::logic_error naming the exporting process `exporter_pid` when the server cannot be reached (the
 *         process is gone, or in another network namespace), refuses the token (withdrawn, or never offered),
 *         or answers with another count; gpumem::cuda_error when a system call fails otherwise.
 */
[[nodiscard]] std::vector<mr::owned_fd> fetch(std::string const& address, token const& key, std::size_t expected,
                                              long long exporter_pid);

}  // namespace gpumem::detail::ipc

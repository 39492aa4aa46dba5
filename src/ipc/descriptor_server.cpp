// descriptor_server (descriptor_server.hpp): the exporting process's socket thread, and the importer's request.
#include "ipc/descriptor_server.hpp"

#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/error.hpp>

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::detail::ipc {
namespace {

constexpr std::uint32_t reply_magic = 0x47504d44;  // "GPMD"
constexpr std::size_t batch_limit = 250;            // descriptors per message (the kernel takes up to 253)
constexpr int server_timeout_seconds = 2;           // a peer that stops talking is dropped
constexpr int client_timeout_seconds = 20;

enum class reply_status : std::uint32_t { ok = 0, unknown_token = 1, other_user = 2 };

struct reply_header {
  std::uint32_t magic;
  std::uint32_t status;
  std::uint32_t total;  // descriptors of the export
  std::uint32_t batch;  // descriptors in this message
};

[[noreturn]] void system_failure(std::string const& what)
{
  throw cuda_error(cudaErrorUnknown, "gpumem IPC: " + what + ": " + std::strerror(errno));
}

/// The process's exports and its server (leaked on purpose: exports may be withdrawn during static
/// destruction, and the detached server thread uses it until the process ends).
struct server_state {
  detail::mutex mutex;
  pid_t pid GPUMEM_GUARDED_BY(mutex){0};  // the process that started the server (0: none)
  int listen_fd GPUMEM_GUARDED_BY(mutex){-1};
  std::string address GPUMEM_GUARDED_BY(mutex);
  std::map<token, std::vector<std::shared_ptr<mr::owned_fd const>>> exports GPUMEM_GUARDED_BY(mutex);
};

server_state& state()
{
  static auto* const s = new server_state;  // NOLINT(cppcoreguidelines-owning-memory): see server_state
  return *s;
}

void random_bytes(unsigned char* out, std::size_t n)
{
  while (n > 0) {
    ssize_t const got = ::getrandom(out, n, 0);
    if (got < 0) {
      if (errno == EINTR) { continue; }
      system_failure("getrandom");
    }
    out += got;
    n -= static_cast<std::size_t>(got);
  }
}

sockaddr_un socket_address(std::string const& name, socklen_t& length)
{
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  expects(!name.empty() && name.size() < sizeof(address.sun_path) - 1,
          "gpumem IPC: socket address \"" + name + "\" is empty or longer than " +
            std::to_string(sizeof(address.sun_path) - 2) + " characters");
  std::memcpy(address.sun_path + 1, name.data(), name.size());  // abstract: sun_path[0] is NUL
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return address;
}

void set_timeouts(int fd, int seconds) noexcept
{
  timeval const limit{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
}

bool send_reply(int fd, reply_status status, std::uint32_t total, int const* descriptors, std::size_t batch) noexcept
{
  reply_header const header{reply_magic, static_cast<std::uint32_t>(status), total, static_cast<std::uint32_t>(batch)};
  iovec part{const_cast<reply_header*>(&header), sizeof header};  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  std::vector<char> control;
  if (batch > 0) {
    control.assign(CMSG_SPACE(batch * sizeof(int)), 0);
    message.msg_control = control.data();
    message.msg_controllen = control.size();
    cmsghdr* const c = CMSG_FIRSTHDR(&message);
    if (c == nullptr) { return false; }  // cannot happen: the control buffer holds one header
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(batch * sizeof(int));
    std::memcpy(CMSG_DATA(c), descriptors, batch * sizeof(int));
  }
  return ::sendmsg(fd, &message, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof header);
}

/// One request: a token in, the export's descriptors (or a refusal) out.
void answer(int connection) noexcept
{
  set_timeouts(connection, server_timeout_seconds);
  ucred peer{};
  socklen_t peer_length = sizeof peer;
  if (::getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &peer, &peer_length) != 0 || peer.uid != ::getuid()) {
    send_reply(connection, reply_status::other_user, 0, nullptr, 0);
    return;
  }
  token key{};
  if (::recv(connection, key.data(), key.size(), 0) != static_cast<ssize_t>(key.size())) { return; }
  server_state& s = state();
  detail::lock_guard lock{s.mutex};  // held while sending: a withdrawal cannot close what is being sent
  auto const found = s.exports.find(key);
  if (found == s.exports.end()) {
    send_reply(connection, reply_status::unknown_token, 0, nullptr, 0);
    return;
  }
  std::vector<int> numbers;
  numbers.reserve(found->second.size());
  for (auto const& fd : found->second) { numbers.push_back(fd->get()); }
  auto const total = static_cast<std::uint32_t>(numbers.size());
  for (std::size_t sent = 0; sent < numbers.size();) {
    std::size_t const batch = std::min(batch_limit, numbers.size() - sent);
    if (!send_reply(connection, reply_status::ok, total, numbers.data() + sent, batch)) { return; }
    sent += batch;
  }
}

void serve(int listen_fd) noexcept
{
  for (;;) {
    int const connection = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) {
      if (errno == EINTR || errno == ECONNABORTED) { continue; }
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the importer retries or times out
        continue;
      }
      std::fprintf(stderr, "gpumem IPC: the export server stops: accept failed: %s\n", std::strerror(errno));
      return;
    }
    answer(connection);
    ::close(connection);
  }
}

/// Starts the server of this process (the caller holds the lock). @throws as offer().
void start_server(server_state& s) GPUMEM_REQUIRES(s.mutex)
{
  if (s.listen_fd >= 0) { ::close(s.listen_fd); }  // a parent's socket, inherited through fork
  s.listen_fd = -1;
  s.exports.clear();                               // the parent's exports are its own
  std::array<unsigned char, 8> suffix{};
  random_bytes(suffix.data(), suffix.size());
  std::string address = "gpumem-ipc." + std::to_string(::getpid()) + ".";
  for (unsigned char const byte : suffix) {
    static constexpr char digits[] = "0123456789abcdef";
    address += digits[byte >> 4];
    address += digits[byte & 15];
  }
  int const fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) { system_failure("socket(AF_UNIX, SOCK_SEQPACKET)"); }
  socklen_t length = 0;
  sockaddr_un const where = socket_address(address, length);
  if (::bind(fd, reinterpret_cast<sockaddr const*>(&where), length) != 0 || ::listen(fd, 64) != 0) {
    int const error = errno;
    ::close(fd);
    errno = error;
    system_failure("binding the export socket \"" + address + "\"");
  }
  std::thread{serve, fd}.detach();
  s.listen_fd = fd;
  s.address = std::move(address);
  s.pid = ::getpid();
}

}  // namespace

std::pair<std::string, token> offer(std::vector<std::shared_ptr<mr::owned_fd const>> descriptors)
{
  token key{};
  random_bytes(key.data(), key.size());
  server_state& s = state();
  detail::lock_guard lock{s.mutex};
  if (s.pid != ::getpid()) { start_server(s); }
  s.exports.emplace(key, std::move(descriptors));
  return {s.address, key};
}

void withdraw(token const& key) noexcept
{
  std::vector<std::shared_ptr<mr::owned_fd const>> closing;
  server_state& s = state();
  {
    detail::lock_guard lock{s.mutex};
    if (s.pid != ::getpid()) { return; }  // a parent's export, seen in a forked child: not this process's
    auto const found = s.exports.find(key);
    if (found == s.exports.end()) { return; }
    closing = std::move(found->second);
    s.exports.erase(found);
  }
}

std::vector<mr::owned_fd> fetch(std::string const& address, token const& key, std::size_t expected,
                                long long exporter_pid)
{
  std::string const who = "the exporting process (pid " + std::to_string(exporter_pid) + ")";
  mr::owned_fd const connection{::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)};
  if (connection.get() < 0) { system_failure("socket(AF_UNIX, SOCK_SEQPACKET)"); }
  socklen_t length = 0;
  sockaddr_un const where = socket_address(address, length);
  if (::connect(connection.get(), reinterpret_cast<sockaddr const*>(&where), length) != 0) {
    throw logic_error("gpumem IPC: cannot reach " + who + " at socket \"" + address + "\": " + std::strerror(errno) +
                      " (the process is gone, or runs in another network namespace)");
  }
  set_timeouts(connection.get(), client_timeout_seconds);
  if (::send(connection.get(), key.data(), key.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(key.size())) {
    system_failure("sending a request to " + who);
  }
  std::vector<mr::owned_fd> received;
  std::vector<char> control(CMSG_SPACE(batch_limit * sizeof(int)));
  for (;;) {
    reply_header header{};
    iovec part{&header, sizeof header};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    message.msg_control = control.data();
    message.msg_controllen = control.size();
    ssize_t const got = ::recvmsg(connection.get(), &message, MSG_CMSG_CLOEXEC);
    if (got < 0) { system_failure("waiting for the answer of " + who); }
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) { continue; }
      std::size_t const count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        received.emplace_back(fd);
      }
    }
    if (got == 0) {
      throw logic_error("gpumem IPC: " + who + " closed the connection after " + std::to_string(received.size()) +
                        " of " + std::to_string(expected) + " descriptors");
    }
    expects(got == static_cast<ssize_t>(sizeof header) && header.magic == reply_magic && (message.msg_flags & MSG_CTRUNC) == 0,
            "gpumem IPC: " + who + " answered with a malformed message (is socket \"" + address + "\" a gpumem server?)");
    switch (static_cast<reply_status>(header.status)) {
      case reply_status::ok: break;
      case reply_status::unknown_token:
        throw logic_error("gpumem IPC: " + who + " has no such export: it was withdrawn (its exported_memory was "
                          "destroyed, or the buffer freed), or the handle is forged");
      case reply_status::other_user:
        throw logic_error("gpumem IPC: " + who + " refuses to share memory with another user");
      default: throw logic_error("gpumem IPC: " + who + " answered with an unknown status");
    }
    expects(header.total == expected, "gpumem IPC: " + who + " holds " + std::to_string(header.total) +
                                        " pieces for this export, the handle names " + std::to_string(expected));
    if (received.size() >= expected) { break; }
  }
  expects(received.size() == expected, "gpumem IPC: received " + std::to_string(received.size()) + " descriptors from " +
                                         who + ", expected " + std::to_string(expected));
  return received;
}

}  // namespace gpumem::detail::ipc

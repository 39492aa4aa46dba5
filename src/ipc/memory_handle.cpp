// memory_handle (ipc.hpp): the fields' checks and their serialisation: "GPUMEMH" and a version byte, the
// fields in little-endian order (strings and lists with their length first), then an FNV-1a checksum of all
// that precedes it.
#include <gpumem/error.hpp>
#include <gpumem/ipc.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

namespace gpumem::ipc {
namespace {

constexpr std::string_view magic{"GPUMEMH"};
constexpr std::uint8_t version = 1;
constexpr std::size_t longest_text = 255;
constexpr std::size_t most_pieces = std::size_t{1} << 20;

static_assert(std::endian::native == std::endian::little, "handles are written little-endian");

[[nodiscard]] std::uint64_t checksum(std::string_view bytes) noexcept
{
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (char const c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

class writer {
 public:
  template <class T>
  void number(T value)
  {
    out_.append(reinterpret_cast<char const*>(&value), sizeof value);
  }
  void text(std::string const& value)
  {
    number(static_cast<std::uint32_t>(value.size()));
    out_ += value;
  }
  template <std::size_t N>
  void raw(std::array<unsigned char, N> const& value)
  {
    out_.append(reinterpret_cast<char const*>(value.data()), N);
  }
  std::string& result() { return out_; }

 private:
  std::string out_;
};

class reader {
 public:
  explicit reader(std::string_view in) : in_{in} {}
  template <class T>
  T number(char const* field)
  {
    T value{};
    std::memcpy(&value, take(sizeof value, field).data(), sizeof value);
    return value;
  }
  std::string text(char const* field)
  {
    auto const length = number<std::uint32_t>(field);
    expects(length <= longest_text, std::string{"gpumem IPC handle: field "} + field + " is " + std::to_string(length) +
                                      " characters long (at most " + std::to_string(longest_text) + ")");
    return std::string{take(length, field)};
  }
  template <std::size_t N>
  void raw(std::array<unsigned char, N>& value, char const* field)
  {
    std::memcpy(value.data(), take(N, field).data(), N);
  }
  [[nodiscard]] std::size_t left() const noexcept { return in_.size(); }

 private:
  std::string_view take(std::size_t n, char const* field)
  {
    expects(n <= in_.size(), std::string{"gpumem IPC handle: truncated in field "} + field);
    std::string_view const part = in_.substr(0, n);
    in_.remove_prefix(n);
    return part;
  }
  std::string_view in_;
};

void check(bool condition, std::string const& what)
{
  if (!condition) { throw logic_error("gpumem IPC handle: " + what); }
}

}  // namespace

std::string_view to_string(mechanism kind) noexcept
{
  switch (kind) {
    case mechanism::vmm: return "vmm";
    case mechanism::cuda_ipc: return "cuda_ipc";
    case mechanism::async_pool: return "async_pool";
  }
  return "unknown";
}

memory_handle::memory_handle(fields contents) : fields_{std::move(contents)}
{
  fields const& f = fields_;
  check(f.kind == mechanism::vmm || f.kind == mechanism::cuda_ipc || f.kind == mechanism::async_pool,
        "unknown mechanism " + std::to_string(static_cast<int>(f.kind)));
  check(f.backend == backend_kind::cuda || f.backend == backend_kind::host,
        "unknown backend " + std::to_string(static_cast<int>(f.backend)));
  check(f.bytes > 0, "it shares no bytes");
  check(f.device >= 0, "device " + std::to_string(f.device) + " is not a device ordinal");
  check(f.exporter_pid > 0, "process id " + std::to_string(f.exporter_pid) + " is not a process");
  check(f.pci_bus_id.size() <= longest_text, "the PCI bus id is too long");
  if (f.kind == mechanism::vmm) {
    check(!f.piece_bytes.empty() && f.piece_bytes.size() <= most_pieces,
          std::to_string(f.piece_bytes.size()) + " pieces (1 to " + std::to_string(most_pieces) + " expected)");
    check(f.granularity > 0 && std::has_single_bit(f.granularity),
          "granularity " + std::to_string(f.granularity) + " is not a power of two");
    std::size_t total = 0;
    for (std::size_t const piece : f.piece_bytes) {
      check(piece > 0 && piece % f.granularity == 0 && piece <= SIZE_MAX - total,
            "a piece of " + std::to_string(piece) + " bytes is not a positive multiple of the granularity " +
              std::to_string(f.granularity));
      total += piece;
    }
    check(f.offset < f.piece_bytes.front() && f.bytes <= total - f.offset,
          std::to_string(f.bytes) + " bytes at offset " + std::to_string(f.offset) + " run past the pieces' " +
            std::to_string(total) + " bytes");
    check(!f.server_address.empty() && f.server_address.size() <= 100,
          "the exporter's socket address is empty or too long");
  } else {
    check(f.piece_bytes.empty(), "a " + std::string{to_string(f.kind)} + " handle names pieces");
    check(f.kind == mechanism::async_pool ? !f.server_address.empty() && f.server_address.size() <= 100
                                          : f.server_address.empty(),
          "the exporter's socket address is " +
            std::string{f.kind == mechanism::async_pool ? "empty or too long" : "not empty in a cuda_ipc handle"});
    check(f.offset <= SIZE_MAX - f.bytes, "offset " + std::to_string(f.offset) + " + the bytes overflows");
  }
}

std::string memory_handle::to_bytes() const
{
  fields const& f = fields_;
  writer w;
  w.result() += magic;
  w.number(version);
  w.number(static_cast<std::uint8_t>(f.kind));
  w.number(static_cast<std::uint8_t>(f.backend));
  w.number(static_cast<std::int32_t>(f.device));
  w.text(f.pci_bus_id);
  w.number(static_cast<std::int64_t>(f.exporter_pid));
  w.number(static_cast<std::uint64_t>(f.bytes));
  w.number(static_cast<std::uint64_t>(f.offset));
  if (f.kind == mechanism::vmm) {
    w.number(static_cast<std::uint64_t>(f.granularity));
    w.number(static_cast<std::uint32_t>(f.piece_bytes.size()));
    for (std::size_t const piece : f.piece_bytes) { w.number(static_cast<std::uint64_t>(piece)); }
    w.text(f.server_address);
    w.raw(f.token);
  } else {
    if (f.kind == mechanism::async_pool) {
      w.text(f.server_address);
      w.raw(f.token);
    }
    w.raw(f.cuda_data);
  }
  w.number(checksum(w.result()));
  return std::move(w.result());
}

memory_handle memory_handle::from_bytes(std::string_view bytes)
{
  check(bytes.size() >= magic.size() + 1 && bytes.substr(0, magic.size()) == magic,
        "not a gpumem IPC handle (" + std::to_string(bytes.size()) + " bytes without its magic \"GPUMEMH\")");
  check(static_cast<std::uint8_t>(bytes[magic.size()]) == version,
        "version " + std::to_string(static_cast<unsigned char>(bytes[magic.size()])) + ", this gpumem reads version " +
          std::to_string(version));
  check(bytes.size() >= magic.size() + 1 + sizeof(std::uint64_t), "truncated (" + std::to_string(bytes.size()) + " bytes)");
  std::string_view const body = bytes.substr(0, bytes.size() - sizeof(std::uint64_t));
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body.size(), sizeof stored);
  check(stored == checksum(body), "its checksum does not match (the handle is truncated or corrupted)");

  reader r{body.substr(magic.size() + 1)};
  fields f;
  auto const kind = r.number<std::uint8_t>("kind");
  check(kind >= static_cast<std::uint8_t>(mechanism::vmm) && kind <= static_cast<std::uint8_t>(mechanism::async_pool),
        "unknown mechanism " + std::to_string(kind));
  f.kind = static_cast<mechanism>(kind);
  auto const backend = r.number<std::uint8_t>("backend");
  check(backend <= static_cast<std::uint8_t>(backend_kind::host), "unknown backend " + std::to_string(backend));
  f.backend = static_cast<backend_kind>(backend);
  f.device = r.number<std::int32_t>("device");
  f.pci_bus_id = r.text("pci_bus_id");
  f.exporter_pid = r.number<std::int64_t>("exporter_pid");
  f.bytes = r.number<std::uint64_t>("bytes");
  f.offset = r.number<std::uint64_t>("offset");
  if (f.kind == mechanism::vmm) {
    f.granularity = r.number<std::uint64_t>("granularity");
    auto const pieces = r.number<std::uint32_t>("piece count");
    check(pieces >= 1 && pieces <= most_pieces && pieces <= r.left() / sizeof(std::uint64_t),
          std::to_string(pieces) + " pieces in a handle of " + std::to_string(bytes.size()) + " bytes");
    f.piece_bytes.reserve(pieces);
    for (std::uint32_t i = 0; i < pieces; ++i) { f.piece_bytes.push_back(r.number<std::uint64_t>("piece")); }
    f.server_address = r.text("server_address");
    r.raw(f.token, "token");
  } else {
    if (f.kind == mechanism::async_pool) {
      f.server_address = r.text("server_address");
      r.raw(f.token, "token");
    }
    r.raw(f.cuda_data, "cuda_data");
  }
  check(r.left() == 0, std::to_string(r.left()) + " bytes left over after its fields");
  return memory_handle{std::move(f)};
}

std::string memory_handle::describe() const
{
  fields const& f = fields_;
  std::string text = std::string{to_string(f.kind)} + " handle of " + format_bytes(f.bytes) + " on " +
                     std::string{to_string(f.backend)} + " device " + std::to_string(f.device);
  if (!f.pci_bus_id.empty()) { text += " (" + f.pci_bus_id + ")"; }
  if (f.kind == mechanism::vmm) { text += " in " + std::to_string(f.piece_bytes.size()) + " piece(s)"; }
  return text + " from process " + std::to_string(f.exporter_pid);
}

}  // namespace gpumem::ipc

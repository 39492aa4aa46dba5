// gpumem/ipc.hpp: handles (round trip, corruption, forgery), exports of the VMM pool's memory imported in this
// process and in a child process (this test binary, spawned with the handle), the lifetimes the header
// promises, and the resources that refuse. Runs on both backends; CUDA IPC of cudaMalloc memory only on the
// cuda backend (the host backend refuses it, which is tested too).
#include "support/device_bytes.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/ipc.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it only with _GNU_SOURCE

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr char child_handle_variable[] = "GPUMEM_IPC_TEST_HANDLE";
constexpr char child_seed_variable[] = "GPUMEM_IPC_TEST_SEED";

/// A pool whose pieces are one 2 MiB slab each, so that a few MiB span several pieces.
mr::vmm_pool_options small_pieces()
{
  mr::vmm_pool_options options;
  options.slab_size = 2 * MiB;
  options.mapping_divisor = 0;
  options.reservation_size = 256 * MiB;
  return options;
}

std::vector<std::uint32_t> pattern(std::size_t count, std::uint32_t seed)
{
  std::vector<std::uint32_t> values(count);
  for (std::size_t i = 0; i < count; ++i) { values[i] = static_cast<std::uint32_t>(i * 2654435761U) ^ seed; }
  return values;
}

void write_pattern(void* ptr, std::size_t bytes, std::uint32_t seed)
{
  device_write(static_cast<std::uint32_t*>(ptr), pattern(bytes / 4, seed), cuda_stream_view{});
  detail::get_backend().stream_synchronize(nullptr);
}

bool holds_pattern(void const* ptr, std::size_t bytes, std::uint32_t seed)
{
  return device_read(static_cast<std::uint32_t const*>(ptr), bytes / 4, cuda_stream_view{}) == pattern(bytes / 4, seed);
}

template <class Call>
std::string error_of(Call&& call)
{
  try {
    call();
  } catch (std::exception const& e) {
    return e.what();
  }
  return "(no exception)";
}

std::string hex(std::string const& bytes)
{
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (char const c : bytes) {
    out += digits[static_cast<unsigned char>(c) >> 4];
    out += digits[static_cast<unsigned char>(c) & 15];
  }
  return out;
}

std::string unhex(std::string const& text)
{
  std::string out;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2) { out += static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16)); }
  return out;
}

/// Runs this test binary's IpcChild test with the handle and a seed in its environment. @return its exit status.
int run_child(ipc::memory_handle const& handle, std::uint32_t seed)
{
  std::vector<std::string> variables;
  for (char** e = environ; *e != nullptr; ++e) { variables.emplace_back(*e); }
  variables.push_back(std::string{child_handle_variable} + "=" + hex(handle.to_bytes()));
  variables.push_back(std::string{child_seed_variable} + "=" + std::to_string(seed));
  std::vector<char*> environment;
  for (auto& v : variables) { environment.push_back(v.data()); }
  environment.push_back(nullptr);
  std::string program = "/proc/self/exe";
  std::string filter = "--gtest_filter=IpcChild.ImportsVerifiesAndWritesBack";
  char* arguments[] = {program.data(), filter.data(), nullptr};
  pid_t child = 0;
  if (::posix_spawn(&child, program.c_str(), nullptr, nullptr, arguments, environment.data()) != 0) { return -1; }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ---- handles -------------------------------------------------------------------------------------------

ipc::memory_handle::fields vmm_fields()
{
  ipc::memory_handle::fields f;
  f.kind = ipc::mechanism::vmm;
  f.backend = backend_kind::host;
  f.device = 1;
  f.exporter_pid = 4242;
  f.bytes = 3 * MiB;
  f.offset = 512;
  f.granularity = 2 * MiB;
  f.piece_bytes = {2 * MiB, 4 * MiB};
  f.server_address = "gpumem-ipc.4242.0011223344556677";
  f.token[0] = 7;
  return f;
}

TEST(IpcHandle, RoundTripsThroughBytes)
{
  ipc::memory_handle const handle{vmm_fields()};
  ipc::memory_handle const back = ipc::memory_handle::from_bytes(handle.to_bytes());
  EXPECT_EQ(back.to_bytes(), handle.to_bytes());
  EXPECT_EQ(back.kind(), ipc::mechanism::vmm);
  EXPECT_EQ(back.size(), 3 * MiB);
  EXPECT_EQ(back.device(), 1);
  EXPECT_EQ(back.exporter_pid(), 4242);
  EXPECT_EQ(back.contents().piece_bytes, (std::vector<std::size_t>{2 * MiB, 4 * MiB}));
  EXPECT_EQ(back.contents().token[0], 7);
  EXPECT_NE(back.describe().find("vmm handle of 3.00 MiB"), std::string::npos) << back.describe();

  ipc::memory_handle::fields c;
  c.kind = ipc::mechanism::cuda_ipc;
  c.exporter_pid = 1;
  c.bytes = 1000;
  c.offset = 4096;
  c.pci_bus_id = "0000:3b:00.0";
  c.cuda_data[63] = 9;
  ipc::memory_handle const cuda{c};
  EXPECT_EQ(ipc::memory_handle::from_bytes(cuda.to_bytes()).contents().cuda_data[63], 9);

  ipc::memory_handle::fields a = c;
  a.kind = ipc::mechanism::async_pool;
  EXPECT_THROW(ipc::memory_handle{a}, logic_error);  // an async_pool handle names the exporter's socket
  a.server_address = "gpumem-ipc.1.00";
  a.token[15] = 4;
  ipc::memory_handle const async{a};
  ipc::memory_handle const async_back = ipc::memory_handle::from_bytes(async.to_bytes());
  EXPECT_EQ(async_back.kind(), ipc::mechanism::async_pool);
  EXPECT_EQ(async_back.contents().server_address, "gpumem-ipc.1.00");
  EXPECT_EQ(async_back.contents().token[15], 4);
  EXPECT_EQ(async_back.contents().cuda_data[63], 9);
}

TEST(IpcHandle, EveryTruncationAndEveryFlippedByteIsAClearError)
{
  std::string const bytes = ipc::memory_handle{vmm_fields()}.to_bytes();
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    EXPECT_THROW((void)ipc::memory_handle::from_bytes(bytes.substr(0, length)), logic_error) << length;
  }
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string corrupted = bytes;
    corrupted[i] = static_cast<char>(corrupted[i] ^ 0x20);
    EXPECT_THROW((void)ipc::memory_handle::from_bytes(corrupted), logic_error) << i;
  }
  EXPECT_NE(error_of([&] { (void)ipc::memory_handle::from_bytes(bytes + "x"); }).find("checksum"), std::string::npos);
  EXPECT_NE(error_of([] { (void)ipc::memory_handle::from_bytes("hello"); }).find("not a gpumem IPC handle"),
            std::string::npos);
  std::string other_version = bytes;
  other_version[7] = 9;
  EXPECT_NE(error_of([&] { (void)ipc::memory_handle::from_bytes(other_version); }).find("version 9"), std::string::npos);
}

TEST(IpcHandle, FieldsOutOfRangeAreRefused)
{
  auto refused = [](auto&& change, char const* part) {
    ipc::memory_handle::fields f = vmm_fields();
    change(f);
    std::string const message = error_of([&] { ipc::memory_handle{f}; });
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  refused([](auto& f) { f.bytes = 0; }, "no bytes");
  refused([](auto& f) { f.device = -1; }, "not a device ordinal");
  refused([](auto& f) { f.exporter_pid = 0; }, "not a process");
  refused([](auto& f) { f.piece_bytes.clear(); }, "0 pieces");
  refused([](auto& f) { f.piece_bytes[1] = 3 * MiB; }, "not a positive multiple");
  refused([](auto& f) { f.granularity = 3; }, "not a power of two");
  refused([](auto& f) { f.bytes = 6 * MiB; }, "run past");
  refused([](auto& f) { f.offset = 2 * MiB; }, "run past");
  refused([](auto& f) { f.server_address.clear(); }, "socket address");
}

// ---- the VMM pool, imported in this process ---------------------------------------------------------

TEST(IpcVmm, ImportInTheSameProcessSeesTheSameBytesBothWays)
{
  mr::vmm_pool_memory_resource pool{small_pieces()};
  std::size_t const bytes = 5 * MiB;  // three pieces of 2 MiB
  void* const p = pool.allocate(bytes);
  write_pattern(p, bytes, 1);
  ipc::exported_memory const exported = ipc::export_memory(pool, p, bytes);
  EXPECT_EQ(exported.handle().contents().piece_bytes.size(), 3U);
  ipc::imported_memory imported = ipc::import_memory(ipc::memory_handle::from_bytes(exported.handle().to_bytes()));
  ASSERT_TRUE(imported.is_open());
  EXPECT_NE(imported.data(), p);  // a second view of the same memory
  EXPECT_EQ(imported.size(), bytes);
  EXPECT_EQ(imported.kind(), ipc::mechanism::vmm);
  EXPECT_TRUE(holds_pattern(imported.data(), bytes, 1));
  write_pattern(imported.data(), bytes, 2);
  EXPECT_TRUE(holds_pattern(p, bytes, 2));
  imported.close();
  EXPECT_FALSE(imported.is_open());
  imported.close();  // twice: nothing
  pool.deallocate(p, bytes);
}

TEST(IpcVmm, PartOfABlockASmallBlockAndAdaptorsOverThePool)
{
  mr::vmm_pool_memory_resource pool{small_pieces()};
  void* const big = pool.allocate(6 * MiB);
  write_pattern(big, 6 * MiB, 3);
  char* const middle = static_cast<char*>(big) + 3 * MiB + 256;
  {
    ipc::exported_memory const part = ipc::export_memory(pool, middle, MiB);
    EXPECT_EQ(part.handle().contents().piece_bytes.size(), 2U);  // [3 MiB + 256, 4 MiB + 256) crosses a piece
    ipc::imported_memory const imported = ipc::import_memory(part.handle());
    auto const expected = pattern(6 * MiB / 4, 3);
    auto const seen = device_read(static_cast<std::uint32_t const*>(imported.data()), MiB / 4, cuda_stream_view{});
    EXPECT_TRUE(std::equal(seen.begin(), seen.end(), expected.begin() + (3 * MiB + 256) / 4));
  }
  void* const small = pool.allocate(1000);  // from a page of small blocks
  write_pattern(small, 1000, 4);
  {
    ipc::imported_memory const imported = ipc::import_memory(ipc::export_memory(pool, small, 1000).handle());
    EXPECT_TRUE(holds_pattern(imported.data(), 1000, 4));
  }
  mr::statistics_resource_adaptor stats{&pool};
  mr::pool_memory_resource sub{&stats, 4 * MiB};
  void* const q = sub.allocate(MiB);
  write_pattern(q, MiB, 5);
  {
    ipc::imported_memory const imported = ipc::import_memory(ipc::export_memory(sub, q, MiB).handle());
    EXPECT_TRUE(holds_pattern(imported.data(), MiB, 5));
  }
  sub.deallocate(q, MiB);
  pool.deallocate(small, 1000);
  pool.deallocate(big, 6 * MiB);
}

TEST(IpcVmm, AnImportOutlivesTheExportTheFreeAndThePool)
{
  std::size_t const bytes = 3 * MiB;
  ipc::imported_memory imported;
  {
    mr::vmm_pool_memory_resource pool{small_pieces()};
    void* const p = pool.allocate(bytes);
    write_pattern(p, bytes, 6);
    {
      ipc::exported_memory exported = ipc::export_memory(pool, p, bytes);
      imported = ipc::import_memory(exported.handle());
      exported.withdraw();
      std::string const message = error_of([&] { (void)ipc::import_memory(exported.handle()); });
      EXPECT_NE(message.find("withdrawn"), std::string::npos) << message;
    }
    pool.deallocate(p, bytes);
    EXPECT_GT(pool.release_unused(), 0U);  // the pool gives its pieces back; the import still maps them
  }
  EXPECT_TRUE(holds_pattern(imported.data(), bytes, 6));
}

TEST(IpcVmm, MemoryOfAnotherDeviceIsImportedOnThatDevice)
{
  detail::backend& be = detail::get_backend();
  if (be.device_count() < 2) { GTEST_SKIP() << "needs two devices"; }
  int const previous = be.current_device();
  be.set_current_device(1);
  {
    mr::vmm_pool_memory_resource pool{small_pieces()};
    void* const p = pool.allocate(3 * MiB);
    write_pattern(p, 3 * MiB, 8);
    ipc::exported_memory const exported = ipc::export_memory(pool, p, 3 * MiB);
    EXPECT_EQ(exported.handle().device(), 1);
    be.set_current_device(0);  // the importer's current device does not decide where the memory is
    ipc::imported_memory imported = ipc::import_memory(exported.handle());
    EXPECT_EQ(imported.device(), 1);
    be.set_current_device(1);
    EXPECT_TRUE(holds_pattern(imported.data(), 3 * MiB, 8));
    imported.close();
    pool.deallocate(p, 3 * MiB);
  }
  be.set_current_device(previous);
}

std::size_t open_descriptors()
{
  std::size_t count = 0;
  for ([[maybe_unused]] auto const& entry : std::filesystem::directory_iterator{"/proc/self/fd"}) { ++count; }
  return count;
}

TEST(IpcVmm, ExportsOfBlocksInOnePieceShareItsDescriptor)
{
  mr::vmm_pool_options options = small_pieces();
  options.slab_size = 32 * MiB;  // one piece holds every block below
  mr::vmm_pool_memory_resource pool{options};
  std::vector<void*> blocks;
  std::vector<ipc::exported_memory> exports;
  for (int i = 0; i < 300; ++i) { blocks.push_back(pool.allocate(64 * 1024)); }
  std::size_t const before = open_descriptors();
  for (void* const b : blocks) { exports.push_back(ipc::export_memory(pool, b, 64 * 1024)); }
  EXPECT_LE(open_descriptors(), before + 4);  // one descriptor for the piece (and the server's socket)
  {
    ipc::imported_memory const last = ipc::import_memory(exports.back().handle());
    write_pattern(blocks.back(), 64 * 1024, 9);
    EXPECT_TRUE(holds_pattern(last.data(), 64 * 1024, 9));
  }
  exports.clear();
  for (void* const b : blocks) { pool.deallocate(b, 64 * 1024); }
  EXPECT_GT(pool.release_unused(), 0U);  // the piece goes back: its descriptor is forgotten
  void* const again = pool.allocate(MiB);  // a new piece, maybe with the old handle's value
  write_pattern(again, MiB, 10);
  ipc::imported_memory const fresh = ipc::import_memory(ipc::export_memory(pool, again, MiB).handle());
  EXPECT_TRUE(holds_pattern(fresh.data(), MiB, 10));
  pool.deallocate(again, MiB);
}

TEST(IpcVmm, ForgedAndStaleHandlesAreClearErrors)
{
  mr::vmm_pool_memory_resource pool{small_pieces()};
  void* const p = pool.allocate(MiB);
  ipc::exported_memory const exported = ipc::export_memory(pool, p, MiB);

  ipc::memory_handle::fields forged = exported.handle().contents();
  forged.token[3] ^= 1;
  std::string message = error_of([&] { (void)ipc::import_memory(ipc::memory_handle{forged}); });
  EXPECT_NE(message.find("no such export"), std::string::npos) << message;

  forged = exported.handle().contents();
  forged.server_address = "gpumem-ipc.gone.0000";
  message = error_of([&] { (void)ipc::import_memory(ipc::memory_handle{forged}); });
  EXPECT_NE(message.find("cannot reach the exporting process"), std::string::npos) << message;

  forged = exported.handle().contents();
  forged.piece_bytes.push_back(2 * MiB);
  message = error_of([&] { (void)ipc::import_memory(ipc::memory_handle{forged}); });
  EXPECT_NE(message.find("pieces for this export"), std::string::npos) << message;

  forged = exported.handle().contents();
  forged.backend = detail::get_backend().kind() == backend_kind::host ? backend_kind::cuda : backend_kind::host;
  message = error_of([&] { (void)ipc::import_memory(ipc::memory_handle{forged}); });
  EXPECT_NE(message.find("cannot be imported on the"), std::string::npos) << message;

  if (detail::get_backend().kind() == backend_kind::host) {
    forged = exported.handle().contents();
    forged.device = detail::get_backend().device_count();
    message = error_of([&] { (void)ipc::import_memory(ipc::memory_handle{forged}); });
    EXPECT_NE(message.find("names host device"), std::string::npos) << message;
  }
  pool.deallocate(p, MiB);
}

TEST(IpcVmm, MemoryThatIsNotInUseCannotBeExported)
{
  mr::vmm_pool_memory_resource pool{small_pieces()};
  void* const p = pool.allocate(MiB);
  std::string message = error_of([&] { (void)ipc::export_memory(pool, static_cast<char*>(p) + MiB, MiB); });
  EXPECT_NE(message.find("overlaps free memory"), std::string::npos) << message;
  int on_the_stack = 0;
  message = error_of([&] { (void)ipc::export_memory(pool, &on_the_stack, sizeof on_the_stack); });
  EXPECT_NE(message.find("cannot share"), std::string::npos) << message;
  EXPECT_THROW((void)ipc::export_memory(pool, nullptr, 8), logic_error);
  EXPECT_THROW((void)ipc::export_memory(pool, p, 0), logic_error);
  pool.deallocate(p, MiB);
  pool.check_invariants();
}

TEST(IpcResources, MemoryThatCannotBeSharedIsRefusedNamingTheResource)
{
  mr::managed_memory_resource managed;
  void* const m = managed.allocate(4096);
  std::string const message = error_of([&] { (void)ipc::export_memory(managed, m, 4096); });
  EXPECT_NE(message.find("managed_memory_resource cannot share"), std::string::npos) << message;
  managed.deallocate(m, 4096);

  mr::cuda_memory_resource cuda;
  void* const c = cuda.allocate(MiB);
  if (detail::get_backend().kind() == backend_kind::host) {
    EXPECT_THROW((void)ipc::export_memory(cuda, c, MiB), cuda_error);
  } else {
    ipc::exported_memory const exported = ipc::export_memory(cuda, static_cast<char*>(c) + 4096, 8192);
    EXPECT_EQ(exported.handle().kind(), ipc::mechanism::cuda_ipc);
    EXPECT_EQ(exported.handle().contents().offset, 4096U);
    std::string const same = error_of([&] { (void)ipc::import_memory(exported.handle()); });
    EXPECT_NE(same.find("exported by this process"), std::string::npos) << same;
    EXPECT_THROW((void)ipc::export_memory(cuda, static_cast<char*>(c) + MiB - 256, 512), cuda_error);
  }
  cuda.deallocate(c, MiB);
}

TEST(IpcResources, AStreamOrderedPoolSharesOnlyWhenMadeForIt)
{
  using handle_type = mr::cuda_async_memory_resource::allocation_handle_type;
  mr::cuda_async_memory_resource plain;
  void* const p = plain.allocate(MiB);
  std::string const refused = error_of([&] { (void)ipc::export_memory(plain, p, MiB); });
  EXPECT_NE(refused.find("without export_handle_type posix_file_descriptor"), std::string::npos) << refused;
  plain.deallocate(p, MiB);

  mr::cuda_async_memory_resource shareable{std::nullopt, std::nullopt, handle_type::posix_file_descriptor};
  void* const q = shareable.allocate(MiB);
  if (detail::get_backend().kind() == backend_kind::host) {
    std::string const message = error_of([&] { (void)ipc::export_memory(shareable, q, MiB); });
    EXPECT_NE(message.find("private to their process"), std::string::npos) << message;
  } else {
    ipc::exported_memory const exported = ipc::export_memory(shareable, q, MiB);
    EXPECT_EQ(exported.handle().kind(), ipc::mechanism::async_pool);
    EXPECT_EQ(ipc::memory_handle::from_bytes(exported.handle().to_bytes()).to_bytes(), exported.handle().to_bytes());
    std::string const same = error_of([&] { (void)ipc::import_memory(exported.handle()); });
    EXPECT_NE(same.find("exported by this process"), std::string::npos) << same;
  }
  shareable.deallocate(q, MiB);
}

// ---- another process --------------------------------------------------------------------------------

TEST(IpcProcesses, AChildImportsVerifiesAndWritesBack)
{
  mr::vmm_pool_memory_resource pool{small_pieces()};
  std::size_t const bytes = 5 * MiB + 4096;
  void* const p = pool.allocate(bytes);
  write_pattern(p, bytes, 11);
  {
    ipc::exported_memory const exported = ipc::export_memory(pool, p, bytes);
    ASSERT_EQ(run_child(exported.handle(), 11), 0);
  }
  EXPECT_TRUE(holds_pattern(p, bytes, 11 + 1000));  // the child wrote the next pattern
  pool.deallocate(p, bytes);

  if (detail::get_backend().kind() != backend_kind::cuda) { return; }
  // The CUDA mechanisms: a pool over cudaMalloc (CUDA IPC) and a stream-ordered pool made for sharing.
  auto round_trip = [](mr::device_memory_resource& resource, std::size_t size, std::uint32_t seed,
                       ipc::mechanism expected) {
    void* const q = resource.allocate(size);
    write_pattern(q, size, seed);
    {
      ipc::exported_memory const exported = ipc::export_memory(resource, q, size);
      EXPECT_EQ(exported.handle().kind(), expected);
      EXPECT_EQ(run_child(exported.handle(), seed), 0);
    }
    EXPECT_TRUE(holds_pattern(q, size, seed + 1000));
    resource.deallocate(q, size);
  };
  mr::cuda_memory_resource cuda;
  mr::pool_memory_resource sub{&cuda, 16 * MiB};
  round_trip(sub, 3 * MiB, 21, ipc::mechanism::cuda_ipc);
  mr::cuda_async_memory_resource async{std::nullopt, std::nullopt,
                                       mr::cuda_async_memory_resource::allocation_handle_type::posix_file_descriptor};
  round_trip(async, 2 * MiB, 31, ipc::mechanism::async_pool);
}

/// The child side of AChildImportsVerifiesAndWritesBack (skipped when not spawned by it).
TEST(IpcChild, ImportsVerifiesAndWritesBack)
{
  char const* const handle_text = std::getenv(child_handle_variable);
  char const* const seed_text = std::getenv(child_seed_variable);
  if (handle_text == nullptr || seed_text == nullptr) { GTEST_SKIP() << "run by IpcProcesses only"; }
  auto const seed = static_cast<std::uint32_t>(std::stoul(seed_text));
  ipc::memory_handle const handle = ipc::memory_handle::from_bytes(unhex(handle_text));
  ASSERT_NE(handle.exporter_pid(), ::getpid());
  ipc::imported_memory imported = ipc::import_memory(handle);
  ASSERT_TRUE(holds_pattern(imported.data(), imported.size(), seed));
  write_pattern(imported.data(), imported.size(), seed + 1000);
  imported.close();
}

}  // namespace
}  // namespace gpumem::test

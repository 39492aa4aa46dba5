// capture_rules: see capture_rules.hpp.
#include "capture_rules.hpp"

#include "host_error.hpp"

#include <string>
#include <thread>
#include <utility>

namespace gpumem::detail::host {

std::shared_ptr<capture_sequence> capture_rules::active(stream_queue& stream)
{
  auto capture = stream.capture();
  return capture != nullptr && !capture->over() ? capture : nullptr;
}

void capture_rules::refuse(captures const& affected, cudaError_t code, std::string const& what)
{
  for (auto const& capture : affected) { capture->invalidate(what + " (" + cudaGetErrorName(code) + ")"); }
  fail(code, what);
}

void capture_rules::expect_done(capture_sequence& capture, capture_sequence::result result, char const* call)
{
  if (result == capture_sequence::result::done) { return; }
  fail(cudaErrorStreamCaptureInvalidated,
       std::string{call} + ": the stream's capture was invalidated by " + capture.invalidated_by());
}

capture_rules::captures capture_rules::select(std::function<bool(capture_sequence&)> const& meets)
{
  captures found;
  std::lock_guard lock{mutex_};
  std::erase_if(live_, [](auto const& capture) { return capture->over(); });
  for (auto const& capture : live_) {
    if (meets(*capture)) { found.push_back(capture); }
  }
  return found;
}

// ---- beginning and ending a capture -------------------------------------------------------------------

void capture_rules::begin(std::shared_ptr<stream_queue> const& origin, capture_mode mode)
{
  if (origin->kind() == stream_queue::role::legacy_default) {
    fail(cudaErrorStreamCaptureUnsupported, "stream_begin_capture on the legacy default stream");
  }
  if (active(*origin) != nullptr) { fail(cudaErrorIllegalState, "stream_begin_capture: the stream is already capturing"); }
  auto capture = capture_sequence::make(origin, mode);
  std::lock_guard lock{mutex_};
  live_.push_back(std::move(capture));
}

std::vector<capture_sequence::node> capture_rules::end(stream_queue& origin)
{
  auto const capture = active(origin);
  if (capture == nullptr) { fail(cudaErrorIllegalState, "stream_end_capture: the stream is not capturing"); }
  if (!capture->is_origin(origin)) {
    fail(cudaErrorStreamCaptureUnmatched,
         "stream_end_capture on a stream that joined a capture: end it on the stream that began it");
  }
  capture_sequence::outcome ended = capture->end();  // CUDA ends the capture also when it refuses to end it
  if (capture->mode() != capture_mode::relaxed && capture->thread() != std::this_thread::get_id()) {
    fail(cudaErrorStreamCaptureWrongThread,
         "stream_end_capture: a capture not begun in relaxed mode must end on the thread that began it (the "
         "capture is over)");
  }
  if (!ended.invalidated_by.empty()) {
    fail(cudaErrorStreamCaptureInvalidated, "stream_end_capture: the capture was invalidated by " + ended.invalidated_by);
  }
  if (!ended.joined) {
    fail(cudaErrorStreamCaptureUnjoined,
         "stream_end_capture: a stream that joined the capture was not joined back to the origin stream (record an "
         "event on it after its last captured work, and wait on that event from the origin stream)");
  }
  return std::move(ended.nodes);
}

bool capture_rules::is_capturing(stream_queue& stream)
{
  if (stream.kind() == stream_queue::role::legacy_default &&
      !select([&](capture_sequence& c) { return c.involves(stream.device(), true); }).empty()) {
    fail(cudaErrorStreamCaptureImplicit,
         "stream_is_capturing of the legacy default stream while a blocking stream of its device is capturing");
  }
  auto const capture = active(stream);
  return capture != nullptr && !capture->invalidated();
}

// ---- calls on one stream ------------------------------------------------------------------------------

bool capture_rules::capture_work(stream_queue& stream, stream_queue::operation const& work, char const* call)
{
  check_legacy_use(stream, call);
  auto const capture = active(stream);
  if (capture == nullptr) { return false; }
  auto const result = capture->capture(stream, work);
  if (result == capture_sequence::result::over) { return false; }  // ended meanwhile: the stream runs work again
  expect_done(*capture, result, call);
  return true;
}

std::optional<captured_record> capture_rules::capture_event_record(stream_queue& stream)
{
  check_legacy_use(stream, "event_record");
  auto const capture = active(stream);
  if (capture == nullptr) { return std::nullopt; }
  capture_sequence::node_set position;
  auto const result = capture->position(stream, position);
  if (result == capture_sequence::result::over) { return std::nullopt; }
  expect_done(*capture, result, "event_record");
  return captured_record{capture, std::move(position)};
}

bool capture_rules::wait_event(std::shared_ptr<stream_queue> const& stream,
                               std::optional<captured_record> const& captured)
{
  check_legacy_use(*stream, "stream_wait_event");
  auto const own = active(*stream);
  captures const affected_own = own != nullptr ? captures{own} : captures{};
  if (!captured) {
    // "It is invalid to wait on a non-captured event from a stream which is being captured" (without
    // cudaEventWaitExternal, which the backend does not offer).
    if (own != nullptr) {
      refuse(affected_own, cudaErrorStreamCaptureIsolation,
             "stream_wait_event: a capturing stream waits on an event not recorded in its capture");
    }
    return false;
  }
  char const* const ended = "stream_wait_event on an event last recorded in a stream capture that has ended";
  auto const source = captured->capture.lock();
  if (source == nullptr || source->over()) { refuse(affected_own, cudaErrorInvalidValue, ended); }
  if (own != nullptr && own != source) {
    refuse({own, source}, cudaErrorStreamCaptureMerge,
           "stream_wait_event: a capturing stream waits on an event recorded in another capture");
  }
  if (stream->kind() == stream_queue::role::legacy_default) {
    refuse({source}, cudaErrorStreamCaptureUnsupported,
           "stream_wait_event: the legacy default stream cannot join a stream capture");
  }
  // A fork (the stream joins the capture) or a join (a member depends on the event's nodes from now on).
  auto const result = source->join(stream, captured->position);
  if (result == capture_sequence::result::over) { refuse(affected_own, cudaErrorInvalidValue, ended); }
  expect_done(*source, result, "stream_wait_event");
  return true;
}

void capture_rules::refuse_if_capturing(stream_queue& stream, char const* call, cudaError_t code, char const* why)
{
  check_legacy_use(stream, call);
  if (auto const capture = active(stream)) { refuse({capture}, code, std::string{call} + " on a capturing stream" + why); }
}

void capture_rules::refuse_captured_event(captured_record const& captured, char const* call)
{
  auto const capture = captured.capture.lock();
  if (capture == nullptr || capture->over()) {
    fail(cudaErrorInvalidValue, std::string{call} + ": the event was last recorded in a stream capture that has ended");
  }
  refuse({capture}, cudaErrorCapturedEvent, std::string{call} + " of an event recorded in a stream capture in progress");
}

// ---- calls beyond one stream --------------------------------------------------------------------------

void capture_rules::check_legacy_use(stream_queue const& stream, char const* call)
{
  if (stream.kind() != stream_queue::role::legacy_default) { return; }
  int const device = stream.device();
  auto const affected = select([device](capture_sequence& c) { return c.involves(device, true); });
  if (!affected.empty()) {
    refuse(affected, cudaErrorStreamCaptureImplicit,
           std::string{call} + " on the legacy default stream while a blocking stream of its device is capturing");
  }
}

void capture_rules::check_device_synchronize(int device)
{
  auto const affected = select([device](capture_sequence& c) { return c.involves(device, false); });
  if (!affected.empty()) {
    refuse(affected, cudaErrorStreamCaptureUnsupported, "device_synchronize while a stream of the device is capturing");
  }
}

void capture_rules::check_unsafe_call(char const* call)
{
  auto const caller = std::this_thread::get_id();
  auto const affected = select([caller](capture_sequence& c) {
    return c.thread() == caller ? c.mode() != capture_mode::relaxed : c.mode() == capture_mode::global;
  });
  if (!affected.empty()) {
    refuse(affected, cudaErrorStreamCaptureUnsupported,
           std::string{call} + " during a stream capture whose mode prohibits potentially unsafe calls");
  }
}

}  // namespace gpumem::detail::host

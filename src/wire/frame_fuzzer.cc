// Feeds arbitrary bytes to the frame reader and every message parser, in
// arbitrary chunking, both before the handshake and after it (sealed frames,
// whose trailer FrameOpener checks): the reader must never crash, never
// allocate past its limit, and a stream that decoded once must decode the
// same way again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "wire/frame.h"
#include "wire/session.h"

namespace {

// Parses a frame body as the message its type names, as the server would.
void ParseAsItsType(const drover::wire::Frame& frame) {
  using namespace drover::wire;
  Hello hello;
  Auth auth;
  Register reg;
  Control control;
  KvRequest kv;
  Cluster cluster;
  Error error;
  FrameError parse_error;
  switch (frame.type()) {
    case HELLO:
      ParseBody(frame, &hello, &parse_error);
      break;
    case AUTH:
      ParseBody(frame, &auth, &parse_error);
      break;
    case REGISTER:
      ParseBody(frame, &reg, &parse_error);
      break;
    case CONTROL:
      ParseBody(frame, &control, &parse_error);
      break;
    case KV_REQUEST:
      ParseBody(frame, &kv, &parse_error);
      break;
    case CLUSTER:
      ParseBody(frame, &cluster, &parse_error);
      break;
    case ERROR:
      ParseBody(frame, &error, &parse_error);
      break;
    default:
      break;
  }
}

std::string DecodeAll(std::string_view input, size_t chunk, bool sealed, int* frames) {
  drover::wire::FrameReader reader(sealed ? 1u << 16 : drover::wire::kHandshakeMaxFrameBytes);
  reader.set_sealed(sealed);
  drover::wire::Token key{};
  drover::wire::FrameOpener opener(key, drover::wire::Direction::kClientToServer);
  std::string trace;
  drover::wire::Frame frame;
  drover::wire::FrameError error;
  for (size_t offset = 0; offset < input.size(); offset += chunk) {
    reader.Append(input.substr(offset, chunk));
    for (;;) {
      auto step = reader.Next(&frame, &error);
      if (step == drover::wire::FrameReader::Step::kNeedMore) break;
      if (step == drover::wire::FrameReader::Step::kError) return trace + "E" + error.message;
      if (frame.body.size() > reader.max_frame_bytes()) std::abort();
      if (sealed) {
        if (frame.mac.size() != drover::wire::kFrameMacBytes) std::abort();
        // A forged MAC never opens; the stream ends there, as a server's would.
        drover::wire::FrameError open_error;
        if (!opener.Open(frame, &open_error)) return trace + "M";
      }
      ParseAsItsType(frame);
      ++*frames;
      trace += std::to_string(frame.header.type) + ":" + std::to_string(frame.body.size()) + ";";
    }
  }
  return trace;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (bool sealed : {false, true}) {
    int whole_frames = 0;
    int chunked_frames = 0;
    std::string whole = DecodeAll(input, input.empty() ? 1 : input.size(), sealed, &whole_frames);
    std::string chunked = DecodeAll(input, 1 + size % 7, sealed, &chunked_frames);
    // Chunking must not change what is decoded (an error may come earlier, never differ).
    if (whole_frames != chunked_frames && whole.find('E') == std::string::npos) std::abort();
  }
  return 0;
}

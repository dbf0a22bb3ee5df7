// libFuzzer target: RelayDecoder takes any bytes (a remote agent's stream
// through ssh or srun, with ssh's own messages mixed in) without crashing,
// loses none of them, and hands out the same frames whatever the pieces the
// stream arrives in. Its frames, encoded again and decoded, come back as
// they were.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "os/output_relay.h"

namespace {

using drover::os::RelayDecoder;
using drover::os::RelayFrame;

struct Decoded {
  std::vector<std::string> frames;  // kind, channel and payload of each frame
  std::string raw;                  // every byte that was not a frame
  size_t bytes = 0;                 // payload bytes of frames and raw, together

  void Add(const RelayFrame& frame) {
    if (frame.payload.size() > RelayDecoder::kMaxPayload) __builtin_trap();
    bytes += frame.payload.size();
    if (frame.kind == 'r') {
      raw.append(frame.payload);
      return;
    }
    if (frame.kind != 'o' && frame.kind != 'e' && frame.kind != 's') __builtin_trap();
    frames.push_back(std::string(1, frame.kind) + std::to_string(frame.channel) + ":" +
                     std::string(frame.payload));
  }
};

Decoded DecodeInPieces(std::string_view input, size_t piece) {
  Decoded decoded;
  RelayDecoder decoder;
  auto add = [&](const RelayFrame& frame) { decoded.Add(frame); };
  for (size_t at = 0; at < input.size(); at += piece) decoder.Feed(input.substr(at, piece), add);
  decoder.Finish(add);
  if (decoder.pending() != 0) __builtin_trap();
  return decoded;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const Decoded whole = DecodeInPieces(input, input.size() + 1);
  // Nothing is lost: a frame's header is all that is not handed on.
  if (whole.bytes > input.size()) __builtin_trap();
  for (size_t piece : {size_t{1}, size_t{3}, size_t{1} + size % 17}) {
    const Decoded split = DecodeInPieces(input, piece);
    if (split.frames != whole.frames || split.raw != whole.raw) __builtin_trap();
  }
  // Each frame again, encoded: the same frames, nothing raw.
  std::string again;
  RelayDecoder reencode;
  auto keep = [&](const RelayFrame& frame) {
    if (frame.kind != 'r')
      again += drover::os::EncodeRelayFrame(frame.kind, frame.channel, frame.payload);
  };
  reencode.Feed(input, keep);
  reencode.Finish(keep);
  const Decoded round_trip = DecodeInPieces(again, again.size() + 1);
  if (round_trip.frames != whole.frames || !round_trip.raw.empty()) __builtin_trap();
  return 0;
}

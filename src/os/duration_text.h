// How drover writes a length of time for people and for its own flags:
// seconds, exact to the millisecond, without trailing zeros ("600", "0.25").
// One format for every message ("took no records for 0.3 s", "grace 10 s")
// and every seconds flag a driver hands an agent (--grace 0.25), so what a
// message says is what a flag would take. Pure functions; thread-safe.

#ifndef DROVER_OS_DURATION_TEXT_H_
#define DROVER_OS_DURATION_TEXT_H_

#include <chrono>
#include <string>

namespace drover::os {

// "600", "0.25", "-1.5": the value of a seconds flag.
std::string SecondsValue(std::chrono::milliseconds duration);

// "600 s", "0.25 s": a wait's length in a message.
std::string SecondsText(std::chrono::milliseconds duration);

}  // namespace drover::os

#endif  // DROVER_OS_DURATION_TEXT_H_

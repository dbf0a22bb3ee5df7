// Slurm hostlist and tasks-per-node expressions, expanded into plain lists.
//
// Slurm compresses node lists ("n[1-3,05-07],m[01-02]") and per-node task
// counts ("2(x3),1") in the variables it exports (SLURM_STEP_NODELIST,
// SLURM_STEP_TASKS_PER_NODE, ...). These functions expand them in the order
// Slurm wrote them, without sorting or deduplicating: the order carries the
// task placement.
//
// Pure functions over their argument; safe to call from any thread.

#ifndef DROVER_HOSTLIST_H_
#define DROVER_HOSTLIST_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover {

// Upper bounds on one expansion, so that a typo such as "n[0-999999999]"
// fails with a clear error instead of exhausting memory. A million entries is
// far above any real Slurm allocation (Slurm itself caps a job far lower).
inline constexpr std::size_t kMaxHostlistEntries = std::size_t{1} << 20;
// Total bytes of the expanded host names (not counting per-string overhead).
inline constexpr std::size_t kMaxHostlistBytes = std::size_t{64} << 20;

// Expands a Slurm hostlist expression.
//
//   "n1"                      -> n1
//   "n[1-3,05-07],m[01-02]"   -> n1 n2 n3 n05 n06 n07 m01 m02
//   "a[1-2]b[3-4]"            -> a1b3 a1b4 a2b3 a2b4 (the leftmost group varies slowest)
//   "n[8-10]-ib"              -> n8-ib n9-ib n10-ib
//
// Entries are separated by ',' or whitespace (as scontrol accepts); leading and
// trailing whitespace is ignored and "" expands to an empty list. In a range
// "lo-hi" every number is zero-padded to the width of "lo" ("[08-10]" gives
// 08 09 10; "[8-10]" gives 8 9 10). Errors (kInvalidArgument, naming the input
// and the 0-based byte position): an empty entry (",,"), an unclosed, nested or
// empty bracket, a stray ']', a non-digit inside brackets, hi < lo, a number
// over 18 digits, or an expansion beyond kMaxHostlistEntries/kMaxHostlistBytes.
Result<std::vector<std::string>> ExpandHostlist(std::string_view hostlist);

// Expands a Slurm tasks-per-node expression: "2(x3),1" -> 2 2 2 1.
// Errors (kInvalidArgument, naming the input and position): anything but
// comma-separated "<count>" or "<count>(x<repeat>)" items, a repeat of 0,
// counts above 2^31-1, or more than kMaxHostlistEntries entries in all.
Result<std::vector<int>> ExpandTasksPerNode(std::string_view tasks_per_node);

}  // namespace drover

#endif  // DROVER_HOSTLIST_H_

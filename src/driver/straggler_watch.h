// StragglerWatch: which node holds the others back. Each node's rate (its
// step rate from drover::Report's steps, else its feed rate) is compared with
// the median of the nodes': a node below `ratio` of the median for `after`
// seconds on end is a straggler, named with its host ("worker:3 on h2 at 41%
// of the median step rate"). Nodes that no longer run are left out; it takes
// two nodes to have a median. Driver thread only.

#ifndef DROVER_DRIVER_STRAGGLER_WATCH_H_
#define DROVER_DRIVER_STRAGGLER_WATCH_H_

#include <map>
#include <string>
#include <vector>

namespace drover {

struct NodeRate {
  std::string executor_id;
  std::string task;  // "worker:3"
  std::string host;
  double rate = 0;
};

struct Straggler {
  std::string executor_id;
  double fraction = 0;  // of the median rate
  std::string text;     // "worker:3 on h2 at 41% of the median step rate"
};

class StragglerWatch {
 public:
  StragglerWatch(double ratio = 0.7, double after_s = 30) : ratio_(ratio), after_s_(after_s) {}

  // `t`: seconds since the run started; `unit`: "step" or "feed", for the text.
  std::vector<Straggler> Update(double t, const std::vector<NodeRate>& rates,
                                const std::string& unit);
  // A new round: nobody has been slow yet.
  void Reset() { slow_since_.clear(); }

 private:
  const double ratio_;
  const double after_s_;
  std::map<std::string, double> slow_since_;  // executor id -> t
};

}  // namespace drover

#endif  // DROVER_DRIVER_STRAGGLER_WATCH_H_

#include "driver/etcd_run.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

NodeStatus Left(std::optional<ProgramEnd> end) {
  NodeStatus node;
  node.left = true;
  node.program_end = std::move(end);
  return node;
}

TEST(StoppedAtRunEndTest, ANodeThatLeftIsStoppedUnlessItsProgramExitedZero) {
  EXPECT_FALSE(StoppedAtRunEnd(Left(ProgramEnd{0, 0, "exit code 0", 1.0})));
  EXPECT_TRUE(StoppedAtRunEnd(Left(ProgramEnd{-1, 15, "killed by SIGTERM", 1.0})));
  // Left without a program end: finished as far as anyone knows (a client
  // that sent no heartbeats), unless it said the run ended before it began.
  EXPECT_FALSE(StoppedAtRunEnd(Left(std::nullopt)));
  NodeStatus never_started = Left(std::nullopt);
  never_started.ended_before_start = true;
  EXPECT_TRUE(StoppedAtRunEnd(never_started));
  // Still running, or failed without leaving: not stopped at the end.
  NodeStatus running;
  running.program_end = ProgramEnd{-1, 15, "killed by SIGTERM", 1.0};
  EXPECT_FALSE(StoppedAtRunEnd(running));
}

TEST(EtcdNodeStateTest, NamesEachEndAndTheRunsPhaseForTheRest) {
  EXPECT_EQ(EtcdNodeState(Left(ProgramEnd{-1, 15, "killed by SIGTERM", 1.0}), "stopped"),
            "stopped");
  EXPECT_EQ(EtcdNodeState(Left(ProgramEnd{0, 0, "exit code 0", 1.0}), "stopped"), "finished");
  NodeStatus failed;
  failed.error = "worker:0 exited with exit code 3";
  failed.reported = true;
  failed.alive = false;
  EXPECT_EQ(EtcdNodeState(failed, "formed"), "failed");
  NodeStatus lost;
  lost.error = "its etcd lease expired";
  lost.alive = false;
  EXPECT_EQ(EtcdNodeState(lost, "formed"), "lost");
  const NodeStatus up;
  EXPECT_EQ(EtcdNodeState(up, "formed"), "running");
  EXPECT_EQ(EtcdNodeState(up, "reserving"), "registered");
  EXPECT_EQ(EtcdNodeState(up, "stopped"), "stopped");
}

}  // namespace
}  // namespace drover

// EtcdTestSuite: a GoogleTest fixture whose tests share one etcd member,
// started once for the suite (etcd_test_server.h); each test works under
// its own prefix, TestPrefix(). A member that did not start fails every
// test with why; a failed test gets etcd's logs.

#ifndef DROVER_SRC_ETCD_ETCD_TEST_SUITE_H_
#define DROVER_SRC_ETCD_ETCD_TEST_SUITE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "etcd/etcd_test_server.h"

namespace drover::etcd {

class EtcdTestSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<std::unique_ptr<EtcdTestServer>> server = EtcdTestServer::Start();
    if (server.ok()) {
      server_ = std::move(server).value().release();
    } else {
      start_error_ = new Status(server.status());
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }

  void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_->ToString(); }
  void TearDown() override {
    if (HasFailure() && server_ != nullptr) ADD_FAILURE() << "etcd logs:\n" << server_->Logs();
  }

  // "/<the test's name>".
  static std::string TestPrefix() {
    return std::string("/") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  inline static EtcdTestServer* server_ = nullptr;
  inline static Status* start_error_ = nullptr;
};

}  // namespace drover::etcd

#endif  // DROVER_SRC_ETCD_ETCD_TEST_SUITE_H_

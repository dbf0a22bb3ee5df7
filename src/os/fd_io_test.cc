#include "os/fd_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "os/sigpipe_block.h"
#include "os/unique_fd.h"
#include "testing/status_matchers.h"

namespace drover::os {
namespace {

TEST(ReadAvailableTest, TakesWhatIsThereThenSaysWhenTheWriterIsGone) {
  ASSERT_OK_AND_ASSIGN(Pipe pipe, MakePipe(O_CLOEXEC | O_NONBLOCK));
  std::string out;
  EXPECT_TRUE(ReadAvailable(pipe.read.get(), &out));  // nothing yet: EAGAIN
  EXPECT_EQ(out, "");
  ASSERT_EQ(::write(pipe.write.get(), "abc", 3), 3);
  EXPECT_TRUE(ReadAvailable(pipe.read.get(), &out));
  EXPECT_EQ(out, "abc");
  pipe.write.Reset();
  EXPECT_FALSE(ReadAvailable(pipe.read.get(), &out));
  EXPECT_EQ(out, "abc");
}

TEST(WriteAvailableTest, WritesWhatThePipeTakesAndResumesWhereItStopped) {
  ASSERT_OK_AND_ASSIGN(Pipe pipe, MakePipe(O_CLOEXEC | O_NONBLOCK));
  const std::string data(1 << 20, 'd');  // more than a pipe holds
  size_t done = 0;
  EXPECT_TRUE(WriteAvailable(pipe.write.get(), data, &done));
  EXPECT_GT(done, 0u);
  EXPECT_LT(done, data.size());
  std::string read;
  while (done < data.size()) {
    ASSERT_TRUE(ReadAvailable(pipe.read.get(), &read));
    ASSERT_TRUE(WriteAvailable(pipe.write.get(), data, &done));
  }
  pipe.write.Reset();
  while (ReadAvailable(pipe.read.get(), &read)) {
  }
  EXPECT_EQ(read, data);
}

TEST(WriteAvailableTest, AGoneReaderIsFalse) {
  ASSERT_OK_AND_ASSIGN(Pipe pipe, MakePipe(O_CLOEXEC | O_NONBLOCK));
  pipe.read.Reset();
  SigpipeBlock block;
  size_t done = 0;
  EXPECT_FALSE(WriteAvailable(pipe.write.get(), "x", &done));
  EXPECT_EQ(done, 0u);
}

}  // namespace
}  // namespace drover::os

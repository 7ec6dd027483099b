// What skt-run reads of a node's segments before it takes the node back as a spare.
#include <gtest/gtest.h>

#include <string>

#include "daemon/node_pool.hpp"

namespace skt::run {
namespace {

TEST(OtherJobsSegments, CountsTheBytesOfEveryOtherJobOnTheNode) {
  const std::string listing =
      "   shmid        key job        rank node kind       name        bytes  att  state\n"
      "    1001 0x1 mine          0 n2   checkpoint checkpoint  4096    0  committed 2\n"
      "    1002 0x2 mine+t0       0 n2   workspace  workspace   8192    0\n"
      "    1003 0x3 theirs        1 n2   workspace  workspace   1048576 0\n"
      "    1004 0x4 theirs        1 n2   checkpoint checkpoint  2097152 1  committed 5\n"
      "    1005 0x5 other+hpl     0 n2   reserve    reserve-0   512     0\n"
      "    1006 0x6 mineral       0 n2   workspace  workspace   64      0\n"
      "node n2: launcher noise 42\n";
  const auto others = other_jobs_segments("mine", listing);
  ASSERT_EQ(others.size(), 3u);  // a sub-job of the job's is its own; a longer name is another
  EXPECT_EQ(others.at("theirs"), 3145728u);
  EXPECT_EQ(others.at("other+hpl"), 512u);
  EXPECT_EQ(others.at("mineral"), 64u);
  EXPECT_TRUE(other_jobs_segments("mine", "").empty());
}

}  // namespace
}  // namespace skt::run

#include "libselfckpt/src/policy.hpp"

#include <gtest/gtest.h>

namespace skt {
namespace {

// Values computed by hand (see the formula in policy.hpp).
TEST(Policy, DalyAndYoungIntervals) {
  // 20 s checkpoints, 5 h MTBF: sqrt(2·20·18000) = 848.528 s; Daly's correction brings it to
  // 848.528·(1 + sqrt(1/1800)/3 + 1/16200) - 20 = 835.247 s.
  EXPECT_NEAR(young_interval(20, 18000), 848.5281374, 1e-6);
  EXPECT_NEAR(daly_interval(20, 18000), 835.2471824, 1e-6);
  EXPECT_NEAR(daly_interval(60, 3600), 617.8756496, 1e-6);
  // A checkpoint costing more than twice the MTBF: checkpoint every MTBF.
  EXPECT_EQ(daly_interval(10000, 3600), 3600);
  // Cheaper checkpoints, or failures rarer, mean more frequent, or rarer, checkpoints.
  EXPECT_LT(daly_interval(1, 18000), daly_interval(20, 18000));
  EXPECT_GT(daly_interval(20, 36000), daly_interval(20, 18000));
}

}  // namespace
}  // namespace skt

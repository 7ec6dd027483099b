#include "libselfckpt/internal/call_order.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace skt {
namespace {

TEST(CallOrder, RanksReadAsRuns) {
  EXPECT_EQ(rank_ranges(std::vector<int>{}), "");
  EXPECT_EQ(rank_ranges(std::vector<int>{3}), "3");
  EXPECT_EQ(rank_ranges(std::vector<int>{0, 2}), "0 and 2");
  EXPECT_EQ(rank_ranges(std::vector<int>{0, 1}), "0-1");
  EXPECT_EQ(rank_ranges(std::vector<int>{0, 2, 5, 6, 7}), "0, 2 and 5-7");
  EXPECT_EQ(rank_ranges(std::vector<int>{1, 2, 3, 9, 11, 12}), "1-3, 9 and 11-12");
}

TEST(CallOrder, TheSameCallEverywhereIsInStep) {
  const auto checkpoint = static_cast<std::int32_t>(CollectiveCall::checkpoint);
  EXPECT_FALSE(calls_out_of_step(std::vector<std::int32_t>{checkpoint}));
  EXPECT_FALSE(calls_out_of_step(std::vector<std::int32_t>(7, checkpoint)));
}

TEST(CallOrder, DifferentCallsNameTheirRanks) {
  const auto checkpoint = static_cast<std::int32_t>(CollectiveCall::checkpoint);
  const auto dirty = static_cast<std::int32_t>(CollectiveCall::checkpoint_dirty);
  const auto need = static_cast<std::int32_t>(CollectiveCall::need_checkpoint);
  const auto finalize = static_cast<std::int32_t>(CollectiveCall::finalize);
  EXPECT_EQ(calls_out_of_step(std::vector<std::int32_t>{checkpoint, finalize}),
            "skt_checkpoint on rank 0, skt_finalize on rank 1");
  EXPECT_EQ(calls_out_of_step(std::vector<std::int32_t>{need, checkpoint, checkpoint, need, need}),
            "skt_need_checkpoint on ranks 0 and 3-4, skt_checkpoint on ranks 1-2");
  // A full checkpoint and one of declared ranges take different paths through the protocol.
  EXPECT_EQ(calls_out_of_step(std::vector<std::int32_t>{dirty, dirty, checkpoint}),
            "skt_checkpoint_dirty on ranks 0-1, skt_checkpoint on rank 2");
  EXPECT_EQ(calls_out_of_step(std::vector<std::int32_t>{checkpoint, 99}),
            "skt_checkpoint on rank 0, an unknown call (99) on rank 1");
}

}  // namespace
}  // namespace skt

#include <gtest/gtest.h>

#include "hpl/blas.hpp"

namespace skt::hpl {
namespace {

TEST(SlowKernels, PrescottOnAProcessorWithAvx2IsNamedWithTheSettingThatFixesIt) {
  const auto warning = slow_kernels_warning("Prescott", {.avx2_fma = true, .avx512 = false});
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("Prescott kernels"), std::string::npos);
  EXPECT_NE(warning->find("OPENBLAS_CORETYPE=Haswell"), std::string::npos);
  EXPECT_EQ(warning->find("SkylakeX"), std::string::npos);
}

TEST(SlowKernels, AvxFiveTwelveKernelsAreNamedWhereTheProcessorHasIt) {
  const auto warning = slow_kernels_warning("Sandybridge", {.avx2_fma = true, .avx512 = true});
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("Sandybridge kernels on a processor with AVX-512"), std::string::npos);
  EXPECT_NE(warning->find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos);
}

TEST(SlowKernels, KernelsThatUseTheProcessorOrAProcessorWithoutAvx2AreLeftAlone) {
  EXPECT_FALSE(slow_kernels_warning("Haswell", {.avx2_fma = true, .avx512 = false}));
  EXPECT_FALSE(slow_kernels_warning("SkylakeX", {.avx2_fma = true, .avx512 = true}));
  EXPECT_FALSE(slow_kernels_warning("Zen", {.avx2_fma = true, .avx512 = false}));
  // An older processor, or a name this list does not have: nothing to say.
  EXPECT_FALSE(slow_kernels_warning("Prescott", {.avx2_fma = false, .avx512 = false}));
  EXPECT_FALSE(slow_kernels_warning("Neoversen2", {.avx2_fma = true, .avx512 = false}));
}

// Two ranks unbound on two cores, each OpenBLAS with a thread per core: four threads, told once,
// with the setting that gives each thread a core.
TEST(OversubscribedThreads, BlasThreadsBeyondTheCoresAreNamedWithTheFix) {
  const auto warning =
      oversubscribed_threads_warning({.ranks = 2, .threads = 4, .most_in_one_rank = 2, .cores = 2});
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("OpenBLAS runs 4 threads in the 2 ranks on this host, which may run on 2 "
                          "cores"),
            std::string::npos);
  EXPECT_NE(warning->find("OPENBLAS_NUM_THREADS=1"), std::string::npos);
  // Four ranks on 16 cores, eight threads each: four threads per rank fit.
  const auto wide = oversubscribed_threads_warning(
      {.ranks = 4, .threads = 32, .most_in_one_rank = 8, .cores = 16});
  ASSERT_TRUE(wide.has_value());
  EXPECT_NE(wide->find("OPENBLAS_NUM_THREADS=4"), std::string::npos);
}

TEST(OversubscribedThreads, ThreadsThatFitOrRanksBeyondTheCoresAreLeftAlone) {
  // Bound to a core each (OpenBLAS then starts one thread), or threads that fit.
  EXPECT_FALSE(oversubscribed_threads_warning(
      {.ranks = 2, .threads = 2, .most_in_one_rank = 1, .cores = 2}));
  EXPECT_FALSE(oversubscribed_threads_warning(
      {.ranks = 1, .threads = 2, .most_in_one_rank = 2, .cores = 2}));
  // More ranks than cores is the user's choice (tests on a small machine): threads add nothing.
  EXPECT_FALSE(oversubscribed_threads_warning(
      {.ranks = 4, .threads = 8, .most_in_one_rank = 2, .cores = 2}));
  EXPECT_FALSE(oversubscribed_threads_warning(
      {.ranks = 4, .threads = 4, .most_in_one_rank = 1, .cores = 2}));
}

}  // namespace
}  // namespace skt::hpl

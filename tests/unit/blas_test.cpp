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

}  // namespace
}  // namespace skt::hpl

#include "hpl/report.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "hpl/hpldat.hpp"

namespace skt::hpl {
namespace {

TEST(LuShareDone, TheFirstPanelsCarryTheMostFlops) {
  EXPECT_DOUBLE_EQ(lu_share_done(24576, 192, 0), 0.0);
  EXPECT_DOUBLE_EQ(lu_share_done(24576, 192, 64), 0.875);  // half the order left: 1/8 of the flops
  EXPECT_DOUBLE_EQ(lu_share_done(24576, 192, 128), 1.0);
  EXPECT_DOUBLE_EQ(lu_share_done(1000, 192, 6), 1.0);  // the last panel is narrower
  EXPECT_DOUBLE_EQ(lu_share_done(0, 192, 0), 1.0);
}

TEST(Report, AnOutputFileThatCannotBeOpenedIsNamedWithTheReason) {
  HplDat dat;
  dat.device = 8;
  dat.output_file = "/no-such-directory/HPL.out";
  EXPECT_EQ(Report(dat, true).open_error(),
            "cannot open /no-such-directory/HPL.out, the output file that HPL.dat names (device "
            "out 8): No such file or directory");
  EXPECT_EQ(Report(dat, false).open_error(), "");  // rank 0 alone opens it
  dat.device = 6;
  EXPECT_EQ(Report(dat, true).open_error(), "");
}

TEST(ProgressReport, LineGivesThePanelTheShareAndTheTimeToGo) {
  // Half the flops left after 10 s from the start: 10 s to go.
  const double half = 1 - std::cbrt(0.5);
  const int panel = static_cast<int>(std::ceil(half * 1000));
  const std::string line = ProgressReport(false, 0, 1000, 1, 2, 1, 1000, 0, 0).line(panel, 10.0);
  EXPECT_EQ(
      line.rfind("skt-hpl: N=1000 NB=1 2x1: panel 207 of 1000, 50 % of the flops done, 10 s", 0),
      0u)
      << line;
  EXPECT_NE(line.find("about 10 s to go"), std::string::npos) << line;
}

TEST(ProgressReport, AfterARestoreThePaceIsThisLaunchs) {
  // Restored at panel 64 of 128 (87.5 % done); 2.5 % more in 5 s: 10 % left takes 20 s.
  const int n = 24576, nb = 192;
  int panel = 64;
  while (lu_share_done(n, nb, panel) < 0.9)
    ++panel;
  const double done = lu_share_done(n, nb, panel);
  const double elapsed = 5.0 * (done - 0.875) / 0.025;
  const std::string line = ProgressReport(false, 0, n, nb, 2, 1, 128, 64, 0).line(panel, elapsed);
  EXPECT_NE(line.find("since the restore at panel 64"), std::string::npos) << line;
  EXPECT_NE(line.find(fmt::format("about {:.0f} s to go", (1 - done) * 5.0 / 0.025)),
            std::string::npos)
      << line;
}

TEST(ProgressReport, NoEstimateBeforeAnyProgress) {
  const std::string line = ProgressReport(false, 0, 24576, 192, 2, 1, 128, 10, 0).line(10, 3.0);
  EXPECT_EQ(line.find("to go"), std::string::npos) << line;
}

}  // namespace
}  // namespace skt::hpl

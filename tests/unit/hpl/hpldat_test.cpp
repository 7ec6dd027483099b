// HPL.dat parsing (netlib's default file, several values per line, strict line-numbered errors),
// HPL's variant encoding, and the sizing rules of skt-hpl.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hpl/algorithm.hpp"
#include "hpl/hpldat.hpp"
#include "hpl/run.hpp"
#include "hpl/suggest.hpp"
#include "selfckpt/selfckpt.hpp"

namespace {

using namespace skt::hpl;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    out.push_back(text.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// The default file with the given lines (1-based numbers) replaced.
std::string with_lines(const std::map<int, std::string>& replacements) {
  auto lines = lines_of(kNetlibDefault);
  for (const auto& [number, replacement] : replacements)
    lines.at(static_cast<std::size_t>(number - 1)) = replacement;
  std::string text;
  for (const auto& l : lines)
    text += l + "\n";
  return text;
}

std::string with_line(int number, const std::string& replacement) {
  return with_lines({{number, replacement}});
}

// The line the error names, and that its message contains `words`.
int error_line(const std::string& text, const std::string& words) {
  try {
    parse_hpldat(text, "HPL.dat");
  } catch (const HplDatError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("HPL.dat:" + std::to_string(e.line()) + ": ", 0), 0u)
        << e.what();
    return e.line();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return 0;
}

TEST(HplDat, NetlibDefaultFile) {
  const HplDat d = parse_hpldat(kNetlibDefault);
  EXPECT_EQ(d.output_file, "HPL.out");
  EXPECT_EQ(d.device, 6);
  EXPECT_EQ(d.ns, (std::vector<int>{29, 30, 34, 35}));
  EXPECT_EQ(d.nbs, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_FALSE(d.column_major_map);
  EXPECT_EQ(d.ps, (std::vector<int>{2, 1, 4}));
  EXPECT_EQ(d.qs, (std::vector<int>{2, 4, 1}));
  EXPECT_DOUBLE_EQ(d.threshold, 16.0);
  EXPECT_EQ(d.pfacts, (std::vector<Fact>{Fact::left, Fact::crout, Fact::right}));
  EXPECT_EQ(d.nbmins, (std::vector<int>{2, 4}));
  EXPECT_EQ(d.ndivs, (std::vector<int>{2}));
  EXPECT_EQ(d.rfacts, (std::vector<Fact>{Fact::left, Fact::crout, Fact::right}));
  EXPECT_EQ(d.bcasts, (std::vector<Bcast>{Bcast::ring}));
  EXPECT_EQ(d.depths, (std::vector<int>{0}));
  EXPECT_EQ(d.swap, SwapAlgo::mix);
  EXPECT_EQ(d.swap_threshold, 64);
  EXPECT_FALSE(d.l1_notrans);
  EXPECT_FALSE(d.u_notrans);
  EXPECT_TRUE(d.equil);
  EXPECT_EQ(d.align, 8);
}

TEST(HplDat, ValuesBeyondTheCountAndTrailingWordsAreIgnored) {
  // Like netlib HPL: a count of 2 reads the first two values of the next line.
  const std::string text = with_lines(
      {{5, "2            # of problems sizes (N)"}, {6, "1000 2000 3000 4000 Ns and a comment"}});
  EXPECT_EQ(parse_hpldat(text).ns, (std::vector<int>{1000, 2000}));
}

TEST(HplDat, SeveralValuesPerLineForEveryList) {
  const HplDat d = parse_hpldat(with_lines({{22, "6            # of broadcast"},
                                            {23, "0 1 2 3 4 5  BCASTs"},
                                            {24, "2            # of lookahead depth"},
                                            {25, "0 1          DEPTHs"},
                                            {9, "1            PMAP"}}));
  EXPECT_EQ(d.bcasts.size(), 6u);
  EXPECT_EQ(d.bcasts.back(), Bcast::spread_modified);
  EXPECT_EQ(d.depths, (std::vector<int>{0, 1}));
  EXPECT_TRUE(d.column_major_map);
}

TEST(HplDat, WindowsLineEndingsAndNoFinalNewline) {
  std::string text;
  for (const auto& l : lines_of(kNetlibDefault))
    text += l.substr(0, l.find("  ")) + "\r\n";  // values only
  text.resize(text.size() - 2);
  EXPECT_EQ(parse_hpldat(text).align, 8);
}

TEST(HplDat, MalformedFilesNameTheLine) {
  EXPECT_EQ(error_line(with_line(6, "29 30 x 35   Ns"), "'x' is not an integer (N)"), 6);
  EXPECT_EQ(error_line(with_line(5, "0            # of problems sizes (N)"), "from 1 to 20"), 5);
  EXPECT_EQ(error_line(with_line(5, "21           # of problems sizes (N)"), "from 1 to 20"), 5);
  EXPECT_EQ(error_line(with_line(6, "29 30 34"), "expected 4 values for N, found 3"), 6);
  EXPECT_EQ(error_line(with_line(8, "1 0 3 4      NBs"), "NB must be at least 1, not 0"), 8);
  EXPECT_EQ(error_line(with_line(12, "2 4"), "as many as P"), 12);
  EXPECT_EQ(error_line(with_line(12, "2 0 1        Qs"), "Q must be at least 1"), 12);
  EXPECT_EQ(error_line(with_line(13, "sixteen      threshold"), "not a number"), 13);
  EXPECT_EQ(error_line(with_line(13, "nan          threshold"), "not a number"), 13);
  EXPECT_EQ(error_line(with_line(13, "inf          threshold"), "not a number"), 13);
  EXPECT_EQ(error_line(with_line(15, "0 1 x        PFACTs"), "'x' is not an integer (PFACT)"), 15);
  EXPECT_EQ(error_line(with_line(19, "1            NDIVs"), "NDIV must be at least 2"), 19);
  EXPECT_EQ(error_line(with_line(4, ""), "expected 1 value for the device out"), 4);
}

// netlib HPL's HPL_pdinfo runs a code outside its range as one of its defaults; so does skt-hpl,
// saying so for each line: a file netlib runs is never refused here.
TEST(HplDat, CodesNetlibReplacesRunAsNetlibRunsThem) {
  const std::string text = with_lines({{9, "2            PMAP"},
                                       {15, "0 -1 3       PFACTs"},
                                       {21, "7 1 2        RFACTs"},
                                       {23, "6            BCASTs"},
                                       {26, "3            SWAP"},
                                       {28, "5            L1 in"},
                                       {29, "2            U  in"},
                                       {30, "9            Equilibration"},
                                       {31, "0            memory alignment"}});
  const HplDat d = parse_hpldat(text, "odd.dat");
  EXPECT_FALSE(d.column_major_map);
  EXPECT_EQ(d.pfacts, (std::vector<Fact>{Fact::left, Fact::right, Fact::right}));
  EXPECT_EQ(d.rfacts, (std::vector<Fact>{Fact::right, Fact::crout, Fact::right}));
  EXPECT_EQ(d.bcasts, (std::vector<Bcast>{Bcast::ring_modified}));
  EXPECT_EQ(d.swap, SwapAlgo::spread_roll);
  EXPECT_FALSE(d.l1_notrans);
  EXPECT_FALSE(d.u_notrans);
  EXPECT_TRUE(d.equil);
  EXPECT_EQ(d.align, 4);
  const std::vector<std::string> expected{
      "odd.dat:9: PMAP 2 is neither 0 (row-major) nor 1 (column-major): netlib HPL runs it as 0 "
      "(row-major), and so does this run",
      "odd.dat:15: PFACT code -1 is not one of 0 to 2: netlib HPL runs it as 2 (Right), and so "
      "does this run",
      "odd.dat:15: PFACT code 3 is not one of 0 to 2: netlib HPL runs it as 2 (Right), and so does "
      "this run",
      "odd.dat:21: RFACT code 7 is not one of 0 to 2: netlib HPL runs it as 2 (Right), and so does "
      "this run",
      "odd.dat:23: BCAST code 6 is not one of 0 to 5: netlib HPL runs it as 1 (1ringM), and so "
      "does this run",
      "odd.dat:26: SWAP 3 is not 0 (bin-exch), 1 (long) or 2 (mix): netlib HPL runs it as 1 "
      "(long), and so does this run",
      "odd.dat:28: L1 form 5 is neither 0 nor 1: netlib HPL runs it as 0, and so does this run",
      "odd.dat:29: U form 2 is neither 0 nor 1: netlib HPL runs it as 0, and so does this run",
      "odd.dat:30: Equilibration 9 is neither 0 nor 1: netlib HPL runs it as 1, and so does this "
      "run",
      "odd.dat:31: a memory alignment of 0 doubles is below 1: netlib HPL runs it as 4, and so "
      "does this run"};
  EXPECT_EQ(d.substitutions, expected);
  EXPECT_TRUE(parse_hpldat(kNetlibDefault).substitutions.empty());
}

TEST(HplDat, TruncatedFileNamesTheMissingLine) {
  auto lines = lines_of(kNetlibDefault);
  lines.resize(20);
  std::string text;
  for (const auto& l : lines)
    text += l + "\n";
  EXPECT_EQ(error_line(text, "missing line: expected RFACT"), 21);
  EXPECT_EQ(error_line("", "missing line"), 1);
}

TEST(HplDat, MissingFileIsAClearError) {
  try {
    read_hpldat("/nonexistent/HPL.dat");
    FAIL() << "read a missing file";
  } catch (const HplDatError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/HPL.dat"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}

TEST(HplVariant, EncodingLikeHpl) {
  Algorithm a;
  a.depth = 1;
  a.bcast = Bcast::ring_modified;
  a.rfact = Fact::crout;
  a.ndiv = 2;
  a.pfact = Fact::right;
  a.nbmin = 4;
  EXPECT_EQ(a.encode(false), "WR11C2R4");
  a.depth = 0;
  a.bcast = Bcast::spread_modified;
  a.rfact = Fact::left;
  a.pfact = Fact::crout;
  a.nbmin = 1;
  a.ndiv = 3;
  EXPECT_EQ(a.encode(true), "WC05L3C1");
}

// skt-hpl run without a checkpoint option checkpoints a tenth of the way through, as the
// benchmarks' "a checkpoint every tenth of the panels": N = 12288 with NB = 192 (64 panels) every
// 6, and a test of fewer than 20 panels at every panel.
TEST(HplCheckpoints, ATenthOfThePanelsByDefault) {
  EXPECT_EQ(default_checkpoint_every(64), 6);
  EXPECT_EQ(default_checkpoint_every(128), 12);
  EXPECT_EQ(default_checkpoint_every(20), 2);
  EXPECT_EQ(default_checkpoint_every(19), 1);
  EXPECT_EQ(default_checkpoint_every(1), 1);
  EXPECT_EQ(default_checkpoint_every(0), 1);
}

// A relaunch resumes a test only under the same fingerprint: every parameter that changes the
// matrix, the arithmetic or which rank holds what changes it.
TEST(HplResume, FingerprintCoversEveryParameter) {
  const skt::hpl::Test base{.n = 255, .nb = 16, .p = 2, .q = 2, .algo = Algorithm{}};
  const auto reference = test_fingerprint(base, false);
  EXPECT_EQ(test_fingerprint(base, false), reference);
  EXPECT_NE(test_fingerprint(base, true), reference);  // PMAP: ranks 1 and 2 trade places
  std::vector<skt::hpl::Test> changed(16, base);
  changed[0].n = 256;
  changed[1].nb = 32;
  changed[2].p = 1;
  changed[3].q = 4;
  changed[4].algo.pfact = Fact::crout;
  changed[5].algo.rfact = Fact::left;
  changed[6].algo.nbmin = 2;
  changed[7].algo.ndiv = 3;
  changed[8].algo.bcast = Bcast::ring;
  changed[9].algo.depth = 2;
  changed[10].algo.swap = SwapAlgo::binary_exchange;
  changed[11].algo.align = 4;
  changed[12].algo.swap_threshold = 32;
  changed[13].algo.l1_notrans = true;
  changed[14].algo.u_notrans = true;
  changed[15].algo.equil = false;
  for (std::size_t i = 0; i < changed.size(); ++i)
    EXPECT_NE(test_fingerprint(changed[i], false), reference) << "change " << i;
}

TEST(HplSizing, EqualShareStep) {
  EXPECT_EQ(partition_step(192, 2, 1), 384);
  EXPECT_EQ(partition_step(192, 2, 4), 768);
  EXPECT_EQ(partition_step(100, 2, 3), 600);
}

TEST(HplSizing, UsableFractionPerMode) {
  EXPECT_DOUBLE_EQ(usable_fraction("self", 4, 1), 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(usable_fraction("double", 4, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(usable_fraction("single", 4, 1), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(usable_fraction("self", 16, 2), 14.0 / 32.0);
  EXPECT_DOUBLE_EQ(usable_fraction("none", 4, 1), 1.0);
}

TEST(HplSizing, LargestNFitsAndIsValid) {
  const double bytes = 8.0 * 1024 * 1024 * 1024;  // 8 GiB per rank
  const long n = largest_n(bytes, 192, 2, 1);
  EXPECT_EQ(n % partition_step(192, 2, 1), 0);
  // [A|b] per rank fits, and the next valid N would not.
  auto share = [](long m) {
    return 8.0 * static_cast<double>(m) * static_cast<double>(m + 1) / 2.0;
  };
  EXPECT_LE(share(n), bytes);
  EXPECT_GT(share(n + partition_step(192, 2, 1)), bytes);
}

TEST(HplSizing, TheSmallestGroupIsTheOneTheLibraryMakes) {
  const GroupSettings four{4, 1};
  const std::optional<int> one_host;  // every rank its own SKT_NODE
  // A grid of two on one host: one group of 2, not of 4.
  EXPECT_EQ(smallest_group(2, one_host, four), 2);
  // Five ranks in groups of at most 4: groups of 3 and 2.
  EXPECT_EQ(smallest_group(5, one_host, four), 2);
  // A grid of four on nodes of two: two groups of 2, each across both nodes.
  EXPECT_EQ(smallest_group(4, 2, four), 2);
  // A grid of four on one node of four: no group can survive the node, as the library refuses.
  EXPECT_THROW(smallest_group(4, 4, four), skt::Error);
  EXPECT_THROW(smallest_group(2, 8, four), skt::Error);
  // Two nodes of four ranks: a group for each rank of a node, so four groups of 2.
  EXPECT_EQ(smallest_group(8, 4, four), 2);
  // Sixteen nodes of one rank: four groups of 4.
  EXPECT_EQ(smallest_group(16, 1, four), 4);
  EXPECT_EQ(smallest_group(8, 4, GroupSettings{1, 1}), 1);
  // Three ranks on nodes of two cannot make groups on distinct nodes.
  EXPECT_THROW(smallest_group(3, 2, four), skt::Error);
}

TEST(HplSizing, SizeForFitsTheNodeWithTheWorkBuffers) {
  const NodeMemory node{16.0 * 0x1p30, "test"};
  const GroupSettings four{4, 1};
  const int nb = 192, p = 2, q = 1, depth = 1;
  const long step = partition_step(nb, p, q);
  for (const char* mode : {"none", "self", "double", "single"}) {
    const Sizing s = size_for(node, std::nullopt, p, q, nb, depth, mode, four);
    auto need = [&](long n) {
      return 8.0 * static_cast<double>(n) * static_cast<double>(n + 1) / (p * q) / s.usable +
             work_bytes(n, nb, p, q, depth);
    };
    EXPECT_EQ(s.n % step, 0) << mode;
    EXPECT_GT(s.n, 0) << mode;
    EXPECT_LE(need(s.n), node.bytes / 2) << mode;
    EXPECT_GT(need(s.n + step), node.bytes / 2) << mode;
  }
  // Groups of two on this grid: their checksums take a workspace each, so a quarter is usable.
  EXPECT_EQ(size_for(node, std::nullopt, p, q, nb, depth, "self", four).members, 2);
  EXPECT_DOUBLE_EQ(size_for(node, std::nullopt, p, q, nb, depth, "self", four).usable, 0.25);
  // Both ranks on one node of the cluster: nothing to checkpoint them against, as the library
  // would refuse; without checkpoints they share the node's memory as on one host.
  EXPECT_THROW(size_for(node, 2, p, q, nb, depth, "self", four), skt::Error);
  EXPECT_EQ(size_for(node, 2, p, q, nb, depth, "none", four).n,
            size_for(node, std::nullopt, p, q, nb, depth, "none", four).n);
}

TEST(HplSizing, WorkBytesCountPanelsSwapsAndTheProgram) {
  const double program = 128 * 0x1p20;
  // 1x1, depth 0: one panel of 1000 rows (padded to NB) by NB.
  EXPECT_DOUBLE_EQ(work_bytes(1000, 100, 1, 1, 0), 8.0 * 1000 * 100 + program);
  // 2x1, depth 1: two panels of 500 rows, and the swaps' five buffers of NB by 1100 columns.
  EXPECT_DOUBLE_EQ(work_bytes(1000, 100, 2, 1, 1),
                   8.0 * (2 * 500 * 100 + 5 * 1100 * 100) + program);
}

TEST(HplSizing, AGivenNodeLeavesAnEighthToTheSystem) {
  EXPECT_DOUBLE_EQ(given_node_memory("64G").bytes, 56.0 * 0x1p30);
  EXPECT_THROW(given_node_memory("lots"), std::invalid_argument);
}

}  // namespace

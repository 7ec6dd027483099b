#include "libselfckpt/src/config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "libselfckpt/src/monitor.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {
namespace {

std::string config_error(const std::string& path, const Environment& env) {
  try {
    load_config(path, env);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_CONFIG);
    return e.what();
  }
  ADD_FAILURE() << "expected a configuration error";
  return {};
}

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/skt-config-XXXXXX";
    const int fd = mkstemp(name);
    close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Config, Defaults) {
  const Config c = load_config("", {});
  EXPECT_EQ(c.group_size, 4);
  EXPECT_EQ(c.scheme, enc::Scheme::xor_parity);
  EXPECT_EQ(c.parity, 1);
  EXPECT_EQ(c.chunk_bytes, 256u * 1024u);
  EXPECT_FALSE(c.fault.has_value());
  EXPECT_FALSE(c.restart.has_value());
}

TEST(Config, EnvironmentOverridesTheFile) {
  TempFile file("group_size = 8\nchunk_size = \"64K\"\njob = \"from-file\"\nlog = \"info\"\n");
  const Config c = load_config(file.path(), {{"SKT_GROUP_SIZE", "2"}, {"SKT_NODE", "n7"}});
  EXPECT_EQ(c.group_size, 2);
  EXPECT_EQ(c.chunk_bytes, 65536u);
  EXPECT_EQ(c.job, "from-file");
  EXPECT_EQ(c.node, "n7");
  EXPECT_EQ(c.log_level, LogLevel::info);
}

TEST(Config, FileNamedBySktConfig) {
  TempFile file("restart = 3\n");
  const Config c = load_config("", {{"SKT_CONFIG", file.path()}});
  EXPECT_EQ(c.restart, 3);
}

TEST(Config, RestartAutoIsUnsetAndOverridesTheFile) {
  TempFile file("restart = 3\n");
  EXPECT_FALSE(load_config(file.path(), {{"SKT_RESTART", "auto"}}).restart.has_value());
  EXPECT_FALSE(load_config("", {{"SKT_RESTART", "AUTO"}}).restart.has_value());
  EXPECT_EQ(load_config("", {{"SKT_RESTART", "0"}}).restart, 0);
  for (const char* bad : {"-1", "x", "1.5"}) {
    const std::string m = config_error("", {{"SKT_RESTART", bad}});
    EXPECT_NE(m.find("is not a relaunch count"), std::string::npos) << m;
    EXPECT_NE(m.find("or auto"), std::string::npos) << m;
  }
}

TEST(Config, UnknownKeysAreErrorsThatListTheKnownOnes) {
  TempFile file("group_size = 4\ngroup_szie = 8\n");
  const std::string m = config_error(file.path(), {});
  EXPECT_NE(m.find(":2: group_szie: unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("group_size"), std::string::npos) << m;
  const std::string v = config_error("", {{"SKT_GROUPSIZE", "4"}});
  EXPECT_NE(v.find("SKT_GROUPSIZE: unknown variable; did you mean SKT_GROUP_SIZE?"),
            std::string::npos)
      << v;
  for (const char* typo : {"SKT_GROUP_SZIE", "SKT_SHCEME", "SKT_MTBFF", "SKT_PARTIY"}) {
    EXPECT_NE(config_error("", {{typo, "4"}}).find("did you mean"), std::string::npos) << typo;
  }
}

// An SKT_* variable of the user's own scripts that is near no setting is ignored, and said (the
// session warns, once), not a reason to stop a job that would run.
TEST(Config, OtherVariablesWithThePrefixAreIgnored) {
  const Config c =
      load_config("", {{"SKT_FOO", "1"}, {"SKT_MY_SCRIPT_DIR", "/x"}, {"SKT_MODE", "self"}});
  EXPECT_EQ(c.ignored_variables, (std::vector<std::string>{"SKT_FOO", "SKT_MY_SCRIPT_DIR"}));
  EXPECT_TRUE(load_config("", {{"SKT_HPL_PAUSE", "3"}}).ignored_variables.empty())
      << "the programs' own SKT_HPL_*, SKT_RUN_* and SKT_TOOLS_* are theirs";
}

TEST(Config, ImpossibleValuesSayWhatToChange) {
  EXPECT_NE(config_error("", {{"SKT_GROUP_SIZE", "0"}}).find("from 1 to 64"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_GROUP_SIZE", "65"}}).find("from 1 to 64"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_GROUP_SIZE", "four"}}).find("'four'"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_CHUNK_SIZE", "1000"}}).find("multiple of 64"),
            std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_SCHEME", "raid6"}}).find("unknown scheme"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_PARITY", "2"}}).find("xor keeps exactly one"),
            std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_JOB", "bad tag!"}}).find("not a valid job tag"),
            std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_JOB", "a+b+c"}}).find("not a valid job tag"),
            std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_MONITOR", "host"}}).find("host:port"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_MONITOR", "host:70000"}}).find("host:port"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_FAULT", "flush"}}).find("<step>:<rank>"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_LOG", "loud"}}).find("unknown log level"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_HUGE_PAGES", "maybe"}}).find("boolean"), std::string::npos);
  EXPECT_NE(config_error("/nonexistent/skt.toml", {}).find("/nonexistent/skt.toml"),
            std::string::npos);
  TempFile broken("group_size = [\n");
  EXPECT_NE(config_error(broken.path(), {}).find(broken.path() + ":"), std::string::npos);
}

TEST(Config, ModesSchemesAndMtbf) {
  const Config c = load_config(
      "", {{"SKT_MODE", "double"}, {"SKT_SCHEME", "rs"}, {"SKT_PARITY", "3"}, {"SKT_MTBF", "5h"}});
  EXPECT_EQ(c.mode, Mode::twin);
  EXPECT_EQ(c.scheme, enc::Scheme::reed_solomon);
  EXPECT_EQ(c.parity, 3);
  EXPECT_DOUBLE_EQ(c.mtbf_seconds, 18000.0);
  EXPECT_EQ(load_config("", {{"SKT_SCHEME", "sum"}}).scheme, enc::Scheme::sum);
  EXPECT_NE(config_error("", {{"SKT_MODE", "triple"}}).find("unknown mode"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_MTBF", "-3"}}).find("positive duration"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_MTBF", "5 weeks"}}).find("positive duration"),
            std::string::npos);
  // Numbers that are no duration: refused wherever a duration is read.
  for (const char* odd : {"nan", "inf", "-inf", "NaN", "infinity", "1e400", "1e305d"}) {
    EXPECT_NE(config_error("", {{"SKT_MTBF", odd}}).find("positive duration"), std::string::npos)
        << odd;
    EXPECT_NE(config_error("", {{"SKT_WAIT_WARNING", odd}}).find("duration of 0 or more"),
              std::string::npos)
        << odd;
  }
  EXPECT_NE(
      config_error("", {{"SKT_SCHEME", "sum"}, {"SKT_PARITY", "2"}}).find("sum keeps exactly one"),
      std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_SCHEME", "rs"}, {"SKT_PARITY", "4"}, {"SKT_GROUP_SIZE", "4"}})
                .find("at least 5 ranks"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(load_config("", {}).wait_warning_seconds, 60.0);
  EXPECT_DOUBLE_EQ(load_config("", {{"SKT_WAIT_WARNING", "10m"}}).wait_warning_seconds, 600.0);
  EXPECT_DOUBLE_EQ(load_config("", {{"SKT_WAIT_WARNING", "0"}}).wait_warning_seconds, 0.0);
  EXPECT_NE(config_error("", {{"SKT_WAIT_WARNING", "-1"}}).find("duration of 0 or more"),
            std::string::npos);
  EXPECT_EQ(load_config("", {}).check_declared, CheckDeclared::sample);
  EXPECT_EQ(load_config("", {{"SKT_CHECK_DECLARED", "ALL"}}).check_declared, CheckDeclared::all);
  EXPECT_EQ(load_config("", {{"SKT_CHECK_DECLARED", "off"}}).check_declared, CheckDeclared::off);
  EXPECT_NE(config_error("", {{"SKT_CHECK_DECLARED", "yes"}}).find("unknown check 'yes'"),
            std::string::npos);
  EXPECT_EQ(parse_duration("90"), 90.0);
  EXPECT_EQ(parse_duration("30m"), 1800.0);
  EXPECT_EQ(parse_duration("2d"), 172800.0);
}

TEST(Config, ProgramSettingsAreLeftToThePrograms) {
  TempFile file("group_size = 2\n[hpl]\ncheckpoint_every = 3\n");
  const Config c =
      load_config(file.path(), {{"SKT_HPL_CHECKPOINT_EVERY", "5"}, {"SKT_RUN_X", "1"}});
  EXPECT_EQ(c.group_size, 2);
  TempFile other("[elsewhere]\nx = 1\n");
  EXPECT_NE(config_error(other.path(), {}).find("elsewhere: unknown key"), std::string::npos);
}

TEST(Config, DrainSettings) {
  EXPECT_TRUE(load_config("", {}).drain_dir.empty());
  const Config every3 =
      load_config("", {{"SKT_DRAIN_DIR", "/scratch/ckpt"}, {"SKT_DRAIN_EVERY", "3"}});
  EXPECT_EQ(every3.drain_dir, "/scratch/ckpt");
  EXPECT_EQ(every3.drain_every_commits, 3);
  EXPECT_EQ(every3.drain_every_seconds, 0);
  const Config timed = load_config("", {{"SKT_DRAIN_EVERY", "30m"}});
  EXPECT_EQ(timed.drain_every_seconds, 1800);
  EXPECT_EQ(timed.drain_every_commits, 1);
  TempFile file("drain_dir = \"/local/disk\"\ndrain_every = \"2h\"\n");
  EXPECT_EQ(load_config(file.path(), {}).drain_every_seconds, 7200);
  EXPECT_NE(config_error("", {{"SKT_DRAIN_EVERY", "0"}}).find("from 1 to"), std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_DRAIN_EVERY", "often"}}).find("positive duration"),
            std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_DRAIN_EVERY", "-5m"}}).find("positive duration"),
            std::string::npos);
  // Every rank must drain to the same place at the same commits.
  EXPECT_NE(every3.shared_settings(), load_config("", {}).shared_settings());
  // What is written: the copy alone by default, its checksum too where asked; a directory per
  // node needs the checksum, since no other node sees its files.
  EXPECT_FALSE(every3.drain_checksum);
  const Config local = load_config(
      "", {{"SKT_DRAIN_DIR", "/local/{node}/ckpt"}, {"SKT_DRAIN_WRITE", "copy+checksum"}});
  EXPECT_TRUE(local.drain_checksum);
  EXPECT_NE(every3.shared_settings(), load_config("", {{"SKT_DRAIN_DIR", "/scratch/ckpt"},
                                                       {"SKT_DRAIN_EVERY", "3"},
                                                       {"SKT_DRAIN_WRITE", "copy+checksum"}})
                                          .shared_settings());
  EXPECT_EQ(expand_node(local.drain_dir, "n3"), "/local/n3/ckpt");
  EXPECT_EQ(expand_node("/a/{node}-{node}", "x"), "/a/x-x");
  EXPECT_NE(config_error("", {{"SKT_DRAIN_WRITE", "checksum"}}).find("'copy+checksum'"),
            std::string::npos);
  EXPECT_NE(config_error("", {{"SKT_DRAIN_DIR", "/local/{node}"}}).find("SKT_DRAIN_WRITE=copy+"),
            std::string::npos);
  EXPECT_EQ(parse_fault("drain:2:4")->step, FaultStep::drain);
  EXPECT_FALSE(parse_fault("drain:2:4:0:throw").has_value());
}

TEST(Config, FaultSpecs) {
  const auto f = parse_fault("flush:3:2");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, FaultStep::flush);
  EXPECT_EQ(f->rank, 3);
  EXPECT_EQ(f->epoch, 2u);
  const auto g = parse_fault("recover:0");
  ASSERT_TRUE(g.has_value());
  EXPECT_FALSE(g->epoch.has_value());
  EXPECT_FALSE(parse_fault("nowhere:1").has_value());
  EXPECT_FALSE(parse_fault("flush:-1").has_value());
  EXPECT_FALSE(parse_fault("flush:1:x").has_value());
  EXPECT_FALSE(f->launch.has_value());
  const auto h = parse_fault("recover:1:2:1");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->epoch, 2u);
  EXPECT_EQ(h->launch, 1);
  EXPECT_EQ(h->action, FaultAction::kill);
  const auto t = parse_fault("flush:1:2:0:term");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->launch, 0);
  EXPECT_EQ(t->action, FaultAction::term);
  EXPECT_EQ(parse_fault("flush:1:2:0:kill")->action, FaultAction::kill);
  EXPECT_EQ(parse_fault("encode:1:2:0:launcher")->action, FaultAction::launcher);
  EXPECT_EQ(parse_fault("encode:1:2:0:throw")->action, FaultAction::raise);
  EXPECT_FALSE(parse_fault("flush:1:2:0:throw").has_value());  // outside a collective phase
  EXPECT_FALSE(parse_fault("flush:1:2:0:stop").has_value());
  EXPECT_FALSE(parse_fault("recover:1:2:").has_value());
  EXPECT_FALSE(parse_fault("recover:1:2:-1").has_value());
}

TEST(Config, Sizes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("64K"), 65536u);
  EXPECT_EQ(parse_size("1MiB"), 1048576u);
  EXPECT_EQ(parse_size("2g"), 2147483648u);
  EXPECT_FALSE(parse_size("12Q").has_value());
  EXPECT_FALSE(parse_size("").has_value());
}

TEST(Config, JobTagsAndSubJobs) {
  EXPECT_TRUE(valid_job_tag("run-1a2b"));
  EXPECT_TRUE(valid_job_tag("run-1a2b+hpl"));
  EXPECT_TRUE(valid_job_tag("x.2+t12"));
  EXPECT_FALSE(valid_job_tag("+hpl"));
  EXPECT_FALSE(valid_job_tag("job+"));
  EXPECT_FALSE(valid_job_tag("job+a+b"));
  EXPECT_FALSE(valid_job_tag(std::string(60, 'a') + "+hpl"));  // 64 characters in all
  EXPECT_TRUE(valid_job_tag(std::string(59, 'a') + "+hpl"));
}

// A context led by another rank than MPI_COMM_WORLD's rank 0 (a member of an ensemble) has a tag of
// its own, a sub-job of the job's, or of the sub-job's.
TEST(Config, ContextTags) {
  EXPECT_EQ(context_job_tag("ens", 0), "ens");
  EXPECT_EQ(context_job_tag("ens", 1), "ens+w1");
  EXPECT_EQ(context_job_tag("run-7+t3", 12), "run-7+t3.w12");
  EXPECT_TRUE(valid_job_tag(*context_job_tag("x.2+hpl", 4095)));
  EXPECT_EQ(context_job_tag(std::string(60, 'a'), 9), std::string(60, 'a') + "+w9");  // 63
  EXPECT_FALSE(context_job_tag(std::string(60, 'a'), 10).has_value());
}

TEST(Config, AJobCoversItsSubJobs) {
  EXPECT_TRUE(job_covers("ens", "ens"));
  EXPECT_TRUE(job_covers("ens", "ens+w1"));
  EXPECT_TRUE(job_covers("ens", "ens+t0.w3"));
  EXPECT_FALSE(job_covers("ens", "ensemble"));
  EXPECT_FALSE(job_covers("ens", "ens2+w1"));
  EXPECT_FALSE(job_covers("ens+w1", "ens"));
}

TEST(Config, MonitorAddresses) {
  const auto a = parse_monitor_address("127.0.0.1:4000");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 4000);
  EXPECT_EQ(parse_monitor_address("login-1.cluster:65535")->host, "login-1.cluster");
  EXPECT_FALSE(parse_monitor_address(":4000").has_value());
  EXPECT_FALSE(parse_monitor_address("host:").has_value());
  EXPECT_FALSE(parse_monitor_address("host:0").has_value());
  EXPECT_FALSE(parse_monitor_address("host:12x").has_value());
}

TEST(Config, SharedSettingsIgnoreTheNode) {
  Config a = load_config("", {{"SKT_NODE", "n1"}});
  Config b = load_config("", {{"SKT_NODE", "n2"}});
  EXPECT_EQ(a.shared_settings(), b.shared_settings());
  Config c = load_config("", {{"SKT_GROUP_SIZE", "2"}});
  EXPECT_NE(a.shared_settings(), c.shared_settings());
}

}  // namespace
}  // namespace skt

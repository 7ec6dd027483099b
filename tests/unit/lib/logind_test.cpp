// When systemd-logind would remove a rank's segments between launches: a login session's end
// removes a non-system user's unattached segments unless RemoveIPC=no or the user lingers.
#include "libselfckpt/src/logind.hpp"

#include <gtest/gtest.h>

namespace skt {
namespace {

LoginFacts over_ssh() {
  LoginFacts facts;
  facts.cgroup = "0::/user.slice/user-1000.slice/session-42.scope\n";
  facts.uid = 1000;
  facts.logind_settings = {"[Login]\n#RemoveIPC=yes\n"};
  return facts;
}

TEST(Logind, ASessionOfAnOrdinaryUserRemovesItsSegments) {
  EXPECT_EQ(session_removing_ipc(over_ssh()), "session-42.scope");
  LoginFacts v1 = over_ssh();
  v1.cgroup =
      "12:memory:/user.slice/user-1000.slice/session-7.scope\n"
      "1:name=systemd:/user.slice/user-1000.slice/session-7.scope\n";
  EXPECT_EQ(session_removing_ipc(v1), "session-7.scope");
}

TEST(Logind, OutsideASessionOrExemptNothingIsRemoved) {
  LoginFacts slurm = over_ssh();
  slurm.cgroup = "0::/system.slice/slurmstepd.scope/job_12/step_0/user/task_0\n";
  EXPECT_FALSE(session_removing_ipc(slurm));
  LoginFacts service = over_ssh();
  service.cgroup = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run.scope\n";
  EXPECT_FALSE(session_removing_ipc(service));
  LoginFacts root = over_ssh();
  root.uid = 0;
  EXPECT_FALSE(session_removing_ipc(root));
  LoginFacts system_user = over_ssh();
  system_user.uid = 999;
  EXPECT_FALSE(session_removing_ipc(system_user));
  LoginFacts lingering = over_ssh();
  lingering.lingering = true;
  EXPECT_FALSE(session_removing_ipc(lingering));
}

TEST(Logind, TheLastRemoveIpcReadInALoginSectionDecides) {
  LoginFacts off = over_ssh();
  off.logind_settings = {"[Login]\nRemoveIPC = no\n"};
  EXPECT_FALSE(session_removing_ipc(off));
  LoginFacts drop_in = over_ssh();
  drop_in.logind_settings = {"[Login]\nRemoveIPC=no\n", "[Login]\nRemoveIPC=yes\n"};
  EXPECT_TRUE(session_removing_ipc(drop_in));
  LoginFacts by_drop_in = over_ssh();
  by_drop_in.logind_settings = {"[Login]\nRemoveIPC=yes\n", "# site\n[Login]\nRemoveIPC=false\n"};
  EXPECT_FALSE(session_removing_ipc(by_drop_in));
  LoginFacts other_section = over_ssh();
  other_section.logind_settings = {"[Other]\nRemoveIPC=no\n"};
  EXPECT_TRUE(session_removing_ipc(other_section));
}

}  // namespace
}  // namespace skt

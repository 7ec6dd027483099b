// Whether systemd-logind will remove the job's segments between launches. logind removes every
// SysV IPC object of a user, unattached shared-memory segments included, when the user's last
// login session on the machine ends (RemoveIPC=yes, its default), unless the user is root or a
// system user, or lingers. A rank running in a login session (mpirun's hosts reached over ssh)
// leaves its checkpoint to that removal when a crash ends the launch and its session with it: the
// relaunch finds the node's memory lost. Segments still attached are left alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace skt {

struct LoginFacts {
  std::string cgroup;  // /proc/self/cgroup
  std::uint32_t uid = 0;
  // logind.conf, then its drop-ins in the order logind reads them.
  std::vector<std::string> logind_settings;
  bool lingering = false;  // loginctl enable-linger: the user never fully logs out
};

// The login session (its cgroup unit, "session-3.scope") whose end would remove this process's
// segments once no process holds them; nothing when logind would leave them.
std::optional<std::string> session_removing_ipc(const LoginFacts& facts);

// The facts of the calling process and machine.
LoginFacts read_login_facts();

}  // namespace skt

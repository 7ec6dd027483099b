#include "libselfckpt/src/logind.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "libselfckpt/internal/memory.hpp"
#include "libselfckpt/src/config.hpp"

namespace skt {
namespace {

// systemd's SYSTEM_UID_MAX as Debian and most distributions build it: IPC of users up to it is
// never removed.
constexpr std::uint32_t kSystemUidMax = 999;

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

// RemoveIPC's value in the [Login] sections of `settings`, the last one read winning; yes when
// none sets it.
bool removes_ipc(const std::vector<std::string>& settings) {
  bool removes = true;
  for (const auto& text : settings) {
    std::istringstream lines(text);
    bool login = false;
    for (std::string line; std::getline(lines, line);) {
      line = trimmed(line);
      if (line.empty() || line[0] == '#' || line[0] == ';') continue;
      if (line[0] == '[') {
        login = line == "[Login]";
        continue;
      }
      const auto equals = line.find('=');
      if (!login || equals == std::string::npos || trimmed(line.substr(0, equals)) != "RemoveIPC")
        continue;
      removes = parse_boolean(trimmed(line.substr(equals + 1))).value_or(removes);
    }
  }
  return removes;
}

// The login session this process runs in: its processes are in
// user.slice/user-UID.slice/session-N.scope (cgroup v2's one hierarchy, or v1's name=systemd one).
std::optional<std::string> login_session(const std::string& cgroup) {
  std::istringstream lines(cgroup);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("/user.slice/") == std::string::npos) continue;
    const auto session = line.find("/session-");
    if (session == std::string::npos) continue;
    const auto end = line.find(".scope", session);
    if (end == std::string::npos) continue;
    return line.substr(session + 1, end + 6 - session - 1);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> session_removing_ipc(const LoginFacts& facts) {
  if (facts.uid <= kSystemUidMax || facts.lingering || !removes_ipc(facts.logind_settings))
    return std::nullopt;
  return login_session(facts.cgroup);
}

LoginFacts read_login_facts() {
  namespace fs = std::filesystem;
  LoginFacts facts;
  facts.cgroup = read_file("/proc/self/cgroup");
  facts.uid = static_cast<std::uint32_t>(getuid());
  // Outside a session, or exempt, the rest cannot matter: not read at every skt_init of a batch
  // job, and no user lookup.
  if (facts.uid <= kSystemUidMax || !login_session(facts.cgroup)) return facts;
  facts.logind_settings.push_back(read_file("/etc/systemd/logind.conf"));
  // Drop-ins, by name across the directories (a name in /etc hides the same name further on).
  std::vector<fs::path> drop_ins;
  for (const char* dir :
       {"/etc/systemd/logind.conf.d", "/run/systemd/logind.conf.d",
        "/usr/local/lib/systemd/logind.conf.d", "/usr/lib/systemd/logind.conf.d"}) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      const bool hidden = std::any_of(drop_ins.begin(), drop_ins.end(), [&](const fs::path& p) {
        return p.filename() == entry.path().filename();
      });
      if (entry.path().extension() == ".conf" && !hidden) drop_ins.push_back(entry.path());
    }
  }
  std::sort(drop_ins.begin(), drop_ins.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  for (const auto& path : drop_ins)
    facts.logind_settings.push_back(read_file(path));
  if (const passwd* user = getpwuid(getuid()))
    facts.lingering = fs::exists(fs::path("/var/lib/systemd/linger") / user->pw_name);
  return facts;
}

}  // namespace skt

#include "libselfckpt/src/monitor.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <mpi.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/mpi.hpp"
#include "libselfckpt/internal/monitor_wire.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

// What a process says when it enters MPI_Finalize and when it exits; made by its first Monitor and
// kept to the end.
struct ProcessReport {
  sockaddr_in to;
  std::string key;  // signs each line (monitor_wire.hpp)
  std::string job;
  int rank;
  int launch;
  pid_t pid;  // the process's: a child it forks inherits the report, and must not send it
  std::atomic<bool> beating{true};  // until the process enters MPI_Finalize or exits
  std::atomic<int> contexts{0};     // open now: its live and finalize reports say how many
};

namespace {

void send_line(int fd, const sockaddr_in& to, const std::string& key, const std::string& line) {
  // Lost datagrams only delay what the supervisor learns; nothing here may stop the program.
  const std::string signed_line = wire::sign(key, line);
  sendto(fd, signed_line.data(), signed_line.size(), MSG_DONTWAIT,
         reinterpret_cast<const sockaddr*>(&to), sizeof to);
}

// Runs inside exit() or MPI_Finalize: a socket of its own, since the Monitors may be gone by then.
// Nothing may leave it (a C callback), least of all an exception that would abort the program's
// exit.
void send_report(const ProcessReport& report, const char* kind, int value) noexcept {
  if (getpid() != report.pid) return;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  try {
    send_line(fd, report.to, report.key,
              wire::format_line({report.job, report.rank, report.launch, getpid(), kind,
                                 static_cast<std::uint64_t>(value), report.contexts.load(), ""}));
  } catch (...) {
    // No memory for the line: the supervisor learns of it from the launcher instead.
  }
  close(fd);
}

void report_exit(int status, void* argument) noexcept {
  auto& report = *static_cast<ProcessReport*>(argument);
  report.beating = false;
  send_report(report, "exit", status & 0xff);
}

// The process beats on after its last context ended: a rank stopped (or its node frozen) between
// its last checkpoint's context and MPI_Finalize goes silent, where before nothing told it from a
// rank still writing its results. The first beat goes at once: the supervisor watches a process
// from its first beat, and a short program may stop before a second. Detached, on a report never
// freed: it may still be asleep when the process exits.
void beat_until_finalize(ProcessReport* report) {
  while (report->beating) {
    send_report(*report, "live", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(wire::kBeatMilliseconds));
  }
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else it does (the standard's
// way to run user functions at process termination), so this runs as the process enters it: a
// supervisor then tells a rank stuck in MPI_Finalize (a frozen MPI daemon, a node frozen after its
// ranks' last checkpoint) from one still at work.
int report_finalize(MPI_Comm, int, void* attribute, void*) noexcept {
  auto& report = *static_cast<ProcessReport*>(attribute);
  report.beating = false;
  send_report(report, "finalize", 0);
  return MPI_SUCCESS;
}

// Counts one more open context of the process; the first also arranges the process's reports,
// and starts its beats once it is counted, so that none says it has no context open.
ProcessReport* count_context(const sockaddr_in& to, const std::string& key, const std::string& job,
                             int rank, int launch) {
  static std::once_flag once;
  static ProcessReport* report = nullptr;
  bool first = false;
  std::call_once(once, [&] {
    // Never freed: exit() reads it after every destructor of the program has run.
    report = new ProcessReport{to, key, job, rank, launch, getpid()};
    on_exit(report_exit, report);
    int keyval = MPI_KEYVAL_INVALID;
    SKT_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, report_finalize, &keyval, nullptr));
    SKT_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, report));
    first = true;
  });
  ++report->contexts;
  if (first) std::thread(beat_until_finalize, report).detach();
  return report;
}

}  // namespace

std::optional<MonitorAddress> parse_monitor_address(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  MonitorAddress a;
  a.host = text.substr(0, colon);
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, a.port);
  if (ec != std::errc() || end != last || a.port < 1 || a.port > 65535) return std::nullopt;
  return a;
}

Monitor::Monitor(const MonitorAddress& address, const std::string& key_hex, std::string job,
                 int rank, int launch, int world_rank)
    : key_(wire::key_from_hex(key_hex).value_or(std::string())),
      job_(std::move(job)),
      rank_(rank),
      launch_(launch),
      world_rank_(world_rank) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(address.host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw Error(SKT_ERR_CONFIG,
                fmt::format("SKT_MONITOR: cannot resolve '{}': {} (skt-run --monitor-host names an "
                            "address every node can reach)",
                            address.host, gai_strerror(rc)));
  }
  std::memcpy(&to_, found->ai_addr, sizeof to_);
  freeaddrinfo(found);
  to_.sin_port = htons(static_cast<std::uint16_t>(address.port));
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    throw Error(SKT_ERR_CONFIG,
                fmt::format("SKT_MONITOR: cannot open a socket: {}", std::strerror(errno)));
  }
  process_ = count_context(to_, key_, job_, world_rank, launch_);
  send("hello");
  thread_ = std::thread([this] { beat(); });
}

Monitor::~Monitor() {
  // The beats end first, so that none follows the bye.
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  --process_->contexts;
  send("bye");
  if (fd_ >= 0) close(fd_);
}

void Monitor::send(const char* kind, const char* call) {
  send_line(fd_, to_, key_,
            wire::format_line({job_, rank_, launch_, getpid(), kind, epoch_.load(), world_rank_,
                               call != nullptr ? call : ""}));
}

void Monitor::beat() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(wire::kBeatMilliseconds),
                         [&] { return stop_; }))
    send("beat", waiting_in_.load());
}

void Monitor::recovered(std::uint64_t epoch, bool from_storage) {
  epoch_ = epoch;
  send(from_storage ? "recovered-storage" : "recovered");
}

void Monitor::committed(std::uint64_t epoch) {
  epoch_ = epoch;
  send("commit");
}

}  // namespace skt

// Liveness and progress, told to whoever supervises the job (skt-run, through SKT_MONITOR): a
// datagram when a rank's context starts, when it recovers, at every commit, when the context ends,
// and every second from a thread of its own. A rank that stops (SIGSTOP, a frozen node) goes
// silent; one that waits in a deadlock keeps beating but commits nothing: the supervisor tells both
// from a slow job. Best effort (UDP, no replies): nothing changes for the program when nobody
// listens.
//
// A datagram is one line, signed (monitor_wire.hpp): "skt1 <job> <rank> <launch> <pid> <kind>
// <epoch> <process> <tag>", kind one of hello, beat, recovered (from memory), recovered-storage
// (from a drained epoch), commit, bye, and <process> the rank of the context's process in
// MPI_COMM_WORLD; and once per process, when it exits (exit(), or main returning), "exit" with the
// exit code in place of the epoch and the rank in MPI_COMM_WORLD: a supervisor then knows the
// program ended, and how, even if its launcher never says so (stopped, or frozen). Before that,
// once, "finalize" (epoch 0) as the process enters MPI_Finalize: one that never leaves it waits on
// a frozen MPI daemon or node, not on its own work. From the process's first context until then,
// "live" (epoch 0, the world rank) every second from a thread of the process: a rank stopped after
// its last context ended, before MPI_Finalize, goes silent too. The process's reports end with the
// number of its contexts open, so that a hello or a bye lost on the way (UDP; a supervisor stopped
// or busy while its socket filled) costs the supervisor one beat, not its knowledge of which
// contexts are open. A context's beat while its rank waits at the start of a collective call for
// the other ranks to make it ends with that call's name ("skt_checkpoint"): a supervisor that ends
// a run for making no progress can then say which ranks wait in which call and which are elsewhere
// (in the program's own communication: a deadlock of the program).
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace skt {

struct ProcessReport;

// "host:port", the host a name or an IPv4 address; nothing if it does not parse.
struct MonitorAddress {
  std::string host;
  int port = 0;
};
std::optional<MonitorAddress> parse_monitor_address(const std::string& text);

class Monitor {
 public:
  // Resolves the address (throws skt::Error(SKT_ERR_CONFIG) when it cannot), says hello and
  // starts beating; the destructor says bye. The first Monitor of a process also arranges the
  // process's finalize and exit reports, as rank `world_rank`.
  Monitor(const MonitorAddress& address, const std::string& key_hex, std::string job, int rank,
          int launch, int world_rank);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  void recovered(std::uint64_t epoch, bool from_storage);
  void committed(std::uint64_t epoch);
  // The collective call this rank waits in for the others (a name that lives as long as the
  // program, from call_name), or nullptr once they all made it.
  void waiting_in(const char* call) noexcept { waiting_in_ = call; }

 private:
  void send(const char* kind, const char* call = nullptr);
  void beat();

  std::string key_;  // signs every datagram (monitor_wire.hpp)
  std::string job_;
  int rank_;
  int launch_;
  int world_rank_;
  ProcessReport* process_ = nullptr;  // the process's reports, which count its open contexts
  int fd_ = -1;
  sockaddr_in to_{};
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<const char*> waiting_in_{nullptr};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace skt

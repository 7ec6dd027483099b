// One launch watched to its end (Supervisor::supervise): the launcher's output passed on, the
// ranks' datagrams heard, the nodes probed, and the launch ended when it hangs, its ranks are done
// but the launcher is not, a node dies or the operator stops skt-run; then what the launch's exit
// says, read with what the ranks reported.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <future>
#include <string_view>
#include <system_error>

#include "daemon/output.hpp"
#include "daemon/ranklist.hpp"
#include "daemon/stop_signal.hpp"
#include "daemon/supervisor.hpp"
#include "libselfckpt/internal/monitor_wire.hpp"

namespace skt::run {
namespace {

// What a stranger's datagram says, fit for a log line.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text)
    out += c >= 32 && c < 127 ? c : '?';
  return out;
}

// Copies what a run writes to this process's output, line by line for standard error (whose last
// lines say why a launcher failed).
class Passthrough {
 public:
  Passthrough(int fd, int to, std::deque<std::string>* tail) : fd_(fd), to_(to), tail_(tail) {}
  // Returns false at the end of the stream.
  bool read_some() {
    char buffer[8192];
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) return false;
    output::write(to_, std::string_view(buffer, static_cast<std::size_t>(n)));
    if (tail_ != nullptr) {
      pending_.append(buffer, static_cast<std::size_t>(n));
      std::size_t end;
      while ((end = pending_.find('\n')) != std::string::npos) {
        tail_->push_back(pending_.substr(0, end));
        if (tail_->size() > 60) tail_->pop_front();
        pending_.erase(0, end + 1);
      }
    }
    return true;
  }

 private:
  int fd_;
  int to_;
  std::deque<std::string>* tail_;
  std::string pending_;
};

WatchLimits limits_of(const Options& o) {
  WatchLimits limits;
  limits.silence = o.silence;
  limits.startup = o.startup;
  limits.progress_floor = o.progress_floor;
  limits.progress_fixed = o.hang_timeout;
  return limits;
}

}  // namespace

class Supervisor::Watching {
 public:
  Watching(Supervisor& supervisor, Supervised& child, int launch, double cadence)
      : s_(supervisor),
        child_(child),
        launched_(Clock::now()),
        watch_(s_.o_.job, launch, static_cast<int>(s_.plan_.ranklist.size()), limits_of(s_.o_),
               cadence, 0.0),
        stdout_copy_(child.out.get(), STDOUT_FILENO, nullptr),
        stderr_copy_(child.err.get(), STDERR_FILENO, &out_.last_errors),
        next_probe_(s_.o_.probe_interval) {}

  Outcome run() {
    while (out_open_ || err_open_ || !ended_) {
      if (!poll_once()) break;
      if (ended_ || killed_ || stop_signal() != 0) continue;
      if (end_if_launcher_overdue()) continue;
      if (suspended_since_ >= 0) follow_suspension();
      if (end_if_stuck_after_work()) continue;
      continue_stopped_launcher();
      if (end_if_hung()) continue;
      start_probe_when_due();
      collect_reservation();
      collect_probe();
    }
    hear_ranks();  // what came with the launcher's end
    if (reserving_.valid()) {
      if (const std::string said = reserving_.get(); !said.empty()) s_.log_("{}", said);
    }
    conclude();
    return out_;
  }

 private:
  double now() const { return seconds_since(launched_); }

  void end_run() {
    s_.end_run(child_);
    killed_ = true;
  }

  // One wait for the pipes, the ranks and signals; false once the launcher has ended and its
  // pipes had their moment to empty.
  bool poll_once() {
    pollfd fds[4] = {{out_open_ ? child_.out.get() : -1, POLLIN, 0},
                     {err_open_ ? child_.err.get() : -1, POLLIN, 0},
                     {s_.listener_.fd(), POLLIN, 0},
                     {stop_signal_fd(), POLLIN, 0}};
    const int ready = ::poll(fds, 4, 200);
    if (ready < 0 && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "poll");
    output::divert_if_broken(STDOUT_FILENO);
    output::divert_if_broken(STDERR_FILENO);
    if ((fds[0].revents & (POLLIN | POLLHUP)) != 0) out_open_ = stdout_copy_.read_some();
    if ((fds[1].revents & (POLLIN | POLLHUP)) != 0) err_open_ = stderr_copy_.read_some();
    if ((fds[2].revents & POLLIN) != 0) hear_ranks();
    if ((fds[3].revents & POLLIN) != 0) {
      drain_stop_signal_fd();
      // Passed on: the launcher ends the run its own way (and the ranks with it).
      if (!ended_) ::kill(child_.pid, stop_signal());
    }
    if (!ended_) {
      ended_ = reap(child_.pid);
      if (ended_) reaped_at_ = now();
    }
    // Whatever is still in the pipes comes within moments; a rank that kept them open must not
    // keep the run alive.
    return !ended_ || now() - reaped_at_ <= 2.0;
  }

  // What the ranks said since the last time, to the watchdog; and the job's first checkpoint to
  // the state at once.
  void hear_ranks() {
    for (const auto& datagram : s_.listener_.receive_all()) {
      const auto line = skt::wire::verified(s_.monitor_key_, datagram);
      if (!line) {
        if (++forged_ == 1) {
          s_.log_(
              "warning: a datagram not signed by this launch's ranks came to the monitor port "
              "and is ignored (another program, or another user, sent it): '{}'",
              printable(datagram.substr(0, 80)));
        }
        continue;
      }
      const auto h = parse_heard(*line);
      if (!h) continue;
      watch_.heard(*h, now());
      s_.note_sub_job(h->job);
    }
    s_.note_checkpointed(watch_);
    reserve_when_due();
  }

  // Warm spares once the run has committed a checkpoint (its segments are then all there, at
  // their sizes): beside this loop, as a probe is. Again whenever another of the program's
  // contexts commits its first (skt-hpl's test after its record of the run): the segments a spare
  // must hold grew. What a spare has counts.
  void reserve_when_due() {
    const Plan& plan = s_.plan_;
    if (!s_.o_.warm_spares || plan.spares.empty() || reserving_.valid() ||
        watch_.contexts_committed() <= reserved_for_) {
      return;
    }
    reserved_for_ = watch_.contexts_committed();
    // By reference: plan_ changes only once this run is over, and the reserving ends before.
    reserving_ = std::async(std::launch::async,
                            [this] { return reserve_on_spares(s_.o_, s_.plan_, s_.plan_.spares); });
  }

  bool end_if_launcher_overdue() {
    const auto why = watch_.launcher_overdue(now());
    if (!why) return false;
    ranks_code_ = watch_.exit_code();
    s_.log_(
        "{}; ending it (what the ranks printed and it had not passed on is lost): the run's "
        "exit is the ranks', {}",
        *why, *ranks_code_);
    end_run();
    return true;
  }

  // Before a run is ended for what its ranks did not say: a suspended Slurm job stopped them.
  bool suspended_on_purpose(const std::string& why) {
    const Plan& plan = s_.plan_;
    if (plan.slurm_job.empty()) return false;
    const auto answer = slurm_job_suspended(plan.slurm_job, s_.o_.probe_timeout);
    if (!answer.suspended) {
      s_.log_("Slurm did not say whether job {} is suspended ({}): the silence counts as a hang",
              plan.slurm_job, answer.trouble);
      return false;
    }
    if (!*answer.suspended) return false;
    s_.log_(
        "{}, but Slurm job {} is suspended (scontrol suspend, or preemption): its ranks are "
        "stopped on purpose; waiting for it to resume",
        why, plan.slurm_job);
    suspended_since_ = now();
    watch_.pardon(now());
    return true;
  }

  // The ranks are stopped on purpose: nothing they do not say is held against them. Slurm is
  // asked once a second, not at every poll, whether the job resumed.
  void follow_suspension() {
    watch_.pardon(now());
    if (now() < next_resume_check_) return;
    next_resume_check_ = now() + 1.0;
    const std::string& job = s_.plan_.slurm_job;
    const auto answer = slurm_job_suspended(job, s_.o_.probe_timeout);
    if (!answer.suspended) {
      // A controller restarting or frozen says nothing of the job: it stays suspended until
      // Slurm says otherwise (its ranks, if they run again, are pardoned meanwhile).
      if (!slurm_silent_) {
        s_.log_(
            "Slurm did not say whether job {} is still suspended ({}); it stays suspended for "
            "skt-run until Slurm says otherwise",
            job, answer.trouble);
      }
    } else if (!*answer.suspended) {
      s_.log_(
          "Slurm job {} resumed, {:.1f} s after skt-run found it suspended; watching its ranks "
          "again",
          job, now() - suspended_since_);
      suspended_since_ = -1;
    } else if (slurm_silent_) {
      s_.log_("Slurm answers again: job {} is still suspended", job);
    }
    slurm_silent_ = !answer.suspended;
  }

  bool end_if_stuck_after_work() {
    const auto why = watch_.stuck_after_work(now());
    if (!why || suspended_on_purpose(*why)) return why.has_value();
    out_.stuck_after_work = *why;
    s_.log_(
        "{}; ending the run (what the ranks printed and the launcher had not passed on is lost)",
        *why);
    end_run();
    return true;
  }

  // A stopped launcher holds up the ranks' output and their MPI_Finalize, and may stay stopped
  // for good (a stray SIGSTOP, a job-control slip): continued, the run goes on where it was.
  void continue_stopped_launcher() {
    if (!is_stopped(child_.pid)) {
      stopped_since_ = -1;
    } else if (stopped_since_ < 0) {
      stopped_since_ = now();
    } else if (now() - stopped_since_ > s_.o_.silence) {
      s_.log_("the launcher (pid {}) has been stopped for {:.1f} s; continuing it (SIGCONT)",
              child_.pid, now() - stopped_since_);
      ::kill(child_.pid, SIGCONT);
      stopped_since_ = -1;
    }
  }

  bool end_if_hung() {
    const double at = now();
    const auto why = watch_.hung(at);
    if (!why || suspended_on_purpose(*why)) return why.has_value();
    out_.hung = *why;
    out_.stalled_at = watch_.stalled_at(at);
    s_.log_("the run is hung: {}; ending it", *why);
    end_run();
    return true;
  }

  // The probe runs beside this loop, which goes on copying the output and watching the ranks
  // however long a node takes to answer (up to --probe-timeout).
  // The lost nodes due back are asked too: one that answers and passes its check goes back among
  // the spares now, not at the next failure.
  void start_probe_when_due() {
    if (s_.o_.probe_interval <= 0 || probing_.valid() || now() < next_probe_) return;
    probing_ = std::async(std::launch::async, [this, nodes = nodes_of(s_.plan_.ranklist),
                                               due = s_.due_to_return({}, true)] {
      Probed probed = s_.plan_.probe->dead(nodes);
      return std::pair{std::move(probed), due.empty() ? AskedBack{} : s_.ask_returning(due)};
    });
  }

  void take_back_while_running(const AskedBack& asked) {
    // The reserving reads the spares: done first.
    if (reserving_.valid()) {
      if (const std::string said = reserving_.get(); !said.empty()) s_.log_("{}", said);
    }
    if (!s_.take_back(asked)) return;
    s_.save(s_.state_.status, s_.state_.note);
    reserved_for_ = 0;  // the spare that came back gets its reserve
    reserve_when_due();
  }

  void collect_reservation() {
    if (!reserving_.valid() ||
        reserving_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      return;
    }
    if (const std::string said = reserving_.get(); !said.empty()) s_.log_("{}", said);
  }

  void collect_probe() {
    if (!probing_.valid() ||
        probing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      return;
    }
    next_probe_ = now() + s_.o_.probe_interval;
    try {
      const auto [probed, back] = probing_.get();
      take_back_while_running(back);
      if (probed.dead.empty()) return;
      out_.dead_node = probed.describe();
      s_.log_("probe: node {} dead while the run is up; ending it", *out_.dead_node);
      end_run();
    } catch (const std::exception& e) {
      s_.log_("probe failed: {}", e.what());
    }
  }

  // The launch's outcome. skt-run ended it (a hang, a dead node, an overdue launcher, which set
  // ranks_code_) or passed the operator's signal on; or it ended by itself.
  void conclude() {
    const bool ended_by_us = killed_ || stop_signal() != 0;
    if (!ended_by_us && ended_->code != 0) judge_failed_launcher();
    out_.restored = watch_.restored();
    out_.restored_at = watch_.restored_at();
    out_.restored_from_storage = watch_.restored_from_storage();
    out_.code = ranks_code_.value_or(ended_->code);
    if (!ended_by_us) out_.launcher_signal = ended_->signal;
    out_.started = watch_.anyone_started();
    out_.cadence = watch_.cadence();
  }

  // A launcher that failed after its ranks' work ended (killed, or interrupted: Open MPI's mpirun
  // then exits 1, ending ranks still in MPI_Finalize) did not fail the program, and a relaunch
  // would do the work again. If every rank reported its exit, their codes are the run's; if some
  // were ended in MPI_Finalize, the run's exit is unknown.
  void judge_failed_launcher() {
    const int code = ended_->code;
    ranks_code_ = watch_.exit_code();
    if (ranks_code_) {
      if (*ranks_code_ != code) {
        s_.log_(
            "the launcher ended with exit {}, after every rank reported its exit: the run's exit "
            "is the ranks', {}",
            code, *ranks_code_);
      }
    } else if (watch_.work_ended() && watch_.failed_exit() == code) {
      // A rank's own verdict (2, 3, 4), which the launcher passed on after ending the ranks
      // still in MPI_Finalize: the run's exit is known. It used to be taken as unknown (exit 8).
      ranks_code_ = code;
      s_.log_(
          "a rank exited with {} after its work, and the launcher ended the ranks still in "
          "MPI_Finalize with that code: the run's exit is {}",
          code, code);
    } else if (watch_.work_ended()) {
      out_.stuck_after_work = fmt::format(
          "the launcher ended with exit {} once every rank had entered MPI_Finalize, every "
          "selfckpt context closed: ranks were ended there, their exit codes unknown",
          code);
      s_.log_("{}", *out_.stuck_after_work);
    }
  }

  Supervisor& s_;
  Supervised& child_;
  Outcome out_;
  Clock::time_point launched_;
  Watchdog watch_;
  Passthrough stdout_copy_;
  Passthrough stderr_copy_;
  bool out_open_ = true;
  bool err_open_ = true;
  bool killed_ = false;  // by skt-run
  std::optional<Ended> ended_;
  double reaped_at_ = 0;
  std::optional<int> ranks_code_;  // the run's exit when skt-run ended a launcher that outlived it
  double stopped_since_ = -1;      // since when the launcher is stopped, while it is
  double suspended_since_ = -1;    // since when the Slurm job is suspended, while it is
  double next_resume_check_ = 0;
  bool slurm_silent_ = false;  // Slurm did not answer the last question whether it resumed
  double next_probe_;
  // The probe in flight while the run is up, and the lost nodes asked whether they are back.
  std::future<std::pair<Probed, AskedBack>> probing_;
  std::future<std::string> reserving_;
  std::size_t reserved_for_ = 0;  // contexts whose segments the spares hold
  int forged_ = 0;                // datagrams whose signature did not verify
};

Outcome Supervisor::supervise(Supervised& child, int launch, double cadence) {
  return Watching(*this, child, launch, cadence).run();
}

}  // namespace skt::run

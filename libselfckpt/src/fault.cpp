#include "libselfckpt/src/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include "libselfckpt/src/log.hpp"

namespace skt {

bool FaultInjector::armed(FaultStep step, std::uint64_t epoch) const noexcept {
  return spec_ && spec_->step == step && spec_->rank == rank_ &&
         (!spec_->epoch || *spec_->epoch == epoch) && (!spec_->launch || *spec_->launch == launch_);
}

void FaultInjector::at(FaultStep step, std::uint64_t epoch) const {
  if (!armed(step, epoch)) return;
  if (spec_->terminate_launcher) {
    if (log_ != nullptr) {
      log_->log(LogLevel::error, "SKT_FAULT: terminating the launcher at step '{}' of epoch {}",
                fault_step_name(step), epoch);
    }
    kill(getppid(), SIGTERM);
    for (;;)
      pause();  // until the launcher's SIGTERM (or SIGKILL) arrives
  }
  if (log_ != nullptr) {
    log_->log(LogLevel::error, "SKT_FAULT: killing this process at step '{}' of epoch {}",
              fault_step_name(step), epoch);
  }
  kill(getpid(), SIGKILL);
  pause();  // SIGKILL cannot be caught; never continue past the injected fault
}

std::function<void(std::uint64_t, std::uint64_t)> FaultInjector::midway(FaultStep step,
                                                                        std::uint64_t epoch) const {
  if (!armed(step, epoch)) return {};
  return [this, step, epoch](std::uint64_t done, std::uint64_t total) {
    if (2 * done >= total) at(step, epoch);
  };
}

}  // namespace skt

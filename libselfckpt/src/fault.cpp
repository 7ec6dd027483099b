#include "libselfckpt/src/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include "libselfckpt/src/log.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

bool FaultInjector::armed(FaultStep step, std::uint64_t epoch) const noexcept {
  return spec_ && spec_->step == step && spec_->rank == rank_ &&
         (!spec_->epoch || *spec_->epoch == epoch) && (!spec_->launch || *spec_->launch == launch_);
}

void FaultInjector::at(FaultStep step, std::uint64_t epoch) const {
  if (!armed(step, epoch)) return;
  if (spec_->action == FaultAction::raise) {
    throw Error(SKT_ERR_INTERNAL, fmt::format("SKT_FAULT: an injected failure at step '{}' of "
                                              "epoch {}",
                                              fault_step_name(step), epoch));
  }
  if (spec_->action == FaultAction::term || spec_->action == FaultAction::launcher) {
    const bool term = spec_->action == FaultAction::term;
    if (log_ != nullptr) {
      log_->log(LogLevel::error, "SKT_FAULT: {} the launcher at step '{}' of epoch {}",
                term ? "terminating" : "killing", fault_step_name(step), epoch);
    }
    kill(getppid(), term ? SIGTERM : SIGKILL);
    for (;;)
      pause();  // until the launcher's SIGTERM arrives, or its death ends this process
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

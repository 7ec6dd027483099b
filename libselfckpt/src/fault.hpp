// SKT_FAULT=<step>:<rank>[:<epoch>[:<launch>[:kill|term|launcher|throw]]] kills the named rank with
// SIGKILL, with no clean-up, at a protocol step of the checkpoint to <epoch> (or of the recovery
// restoring <epoch>), or at the first occurrence when no epoch is given; with <launch>, only on
// that launch (SKT_RESTART), so that a restart daemon relaunching with the same environment gets
// through. With 'term', the rank instead sends SIGTERM to its launcher, which passes it on to every
// rank, and waits there for its own: the whole job is cancelled while this rank is at the step.
// With 'launcher', it kills its launcher (SIGKILL) and waits: the ranks must die with it. With
// 'throw', the call fails on that rank alone with an error, which every rank must then report.
// The steps:
//   stage      in the middle of staging the private regions into the workspace
//   encode     in the middle of computing D, the checksum of the workspace
//   encoded    right after D is complete, before the job-wide agreement
//   agreed     right after recording that every rank encoded, before the flush
//   flush      in the middle of copying W into B (and D into C)
//   committed  right after marking B and C committed, before the final agreement
//   rebuild    in the middle of a recovery's rebuild of the lost ranks, which the survivors'
//              verification goes along with, before the epoch is decided (on a survivor, or on
//              the rank being rebuilt)
//   recover    in the middle of a recovery, after the decision is recorded
//   drain      in the middle of writing the rank's file of a drained epoch (the drain's thread)
//   finalize   in skt_finalize of a completed job, once every rank recorded the job as finished,
//              before this rank removes its segments (the others may have removed theirs)
//   create     in the middle of writing the pages of the rank's new checkpoint segment (its
//              header written, nothing it holds yet; epoch 0): a large segment takes seconds
// It exists for tests; the library never stops a process otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "libselfckpt/src/config.hpp"

namespace skt {

class Logger;

class FaultInjector {
 public:
  FaultInjector(std::optional<FaultSpec> spec, int rank, int launch, Logger* log)
      : spec_(spec), rank_(rank), launch_(launch), log_(log) {}

  bool armed(FaultStep step, std::uint64_t epoch) const noexcept;
  // Kills the process now if armed.
  void at(FaultStep step, std::uint64_t epoch) const;
  // A progress callback that kills the process half way through, if armed.
  std::function<void(std::uint64_t, std::uint64_t)> midway(FaultStep step,
                                                           std::uint64_t epoch) const;

 private:
  std::optional<FaultSpec> spec_;
  int rank_;
  int launch_;
  Logger* log_;
};

}  // namespace skt

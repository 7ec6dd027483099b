// skt-run's standard output and error, which must not end a job when they fail.
//
// An operator's session ends while the job runs: the ssh connection that started skt-run drops
// (its pipes close), the `| tee` after it is ended, a terminal hangs up, the disk under a
// redirection fills. A write into a pipe without a reader kills the writer (SIGPIPE), and a failed
// write makes a formatted print throw: either way skt-run ended, and its run with it, at its next
// line of output, hours of work lost since the last checkpoint. Here a write that fails points
// the descriptor at a file in the job's state directory instead (so that the launcher, the probes
// and the tools skt-run starts, which share the descriptor, write there too), says so there and on
// the other stream, and the output goes on in that file.
#pragma once

#include <string>
#include <string_view>

namespace skt::run::output {

// From now on, a write through write() that fails sends what follows on that descriptor to
// `fallback` (appended; /dev/null where it cannot be opened). A pipe whose reader is gone then
// fails the write instead of killing skt-run: SIGPIPE gets a handler that does nothing, which,
// unlike an ignored signal, the programs skt-run starts do not inherit. Where SIGPIPE was ignored
// already (by whoever started skt-run), it stays so.
void divert_failures_to(std::string fallback);

// Writes all of `bytes` to descriptor `fd` (1 or 2), or to the fallback once a write to it failed.
// Never throws. Before divert_failures_to, a failed write is dropped.
void write(int fd, std::string_view bytes);

// Diverts `fd` to the fallback if the other end is gone (poll reports POLLERR or POLLHUP), before
// anything is written to it: a probe or a tool started now would otherwise write into the broken
// pipe and die of SIGPIPE.
void divert_if_broken(int fd);

// The file the output went to since a write failed; empty while none did.
std::string diverted_to();

}  // namespace skt::run::output

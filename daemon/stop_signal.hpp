// The operator's stop signals (SIGINT, SIGTERM, SIGHUP), as skt-run's loops see them: a pipe that
// becomes readable, and the signal that came.
#pragma once

namespace skt::run {

// Makes SIGINT, SIGTERM and SIGHUP reach the supervisor's loop (those this process ignores stay
// ignored: nohup's SIGHUP). Throws std::system_error when it cannot.
void catch_stop_signals();
// The signal that came; 0 while none has.
int stop_signal() noexcept;
// Readable once a signal came; for poll.
int stop_signal_fd() noexcept;
// Empties the pipe after poll said it is readable.
void drain_stop_signal_fd() noexcept;

}  // namespace skt::run

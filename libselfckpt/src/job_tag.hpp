// Which tags a job covers, for the tools and skt-run alike (skt-run does not link the library).
#pragma once

#include <string_view>

namespace skt {

// A job covers its own tag and its sub-jobs', TAG+<name>: the contexts a program derives from its
// tag (skt-hpl's TAG+hpl and TAG+t0, an ensemble member's TAG+w1). A user's tag has no '+', so no
// sub-job of one job is another job.
inline bool job_covers(std::string_view job, std::string_view tag) {
  return tag == job ||
         (tag.size() > job.size() && tag.substr(0, job.size()) == job && tag[job.size()] == '+');
}

}  // namespace skt

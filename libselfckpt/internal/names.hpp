// Names the library, its tools and skt-run share: modes, node names, job tags and which tags a job
// covers (skt-run does not link the library: job_covers is inline).
#pragma once

#include <string>
#include <string_view>

namespace skt {

// How checkpoints are kept: self-checkpoint (W, B, C, D), or the baselines it is compared with:
// one copy and its checksum (single), or two alternating copies each with its checksum (double).
enum class Mode { self, single, twin };
std::string_view mode_name(Mode mode) noexcept;

// SKT_DRAIN_DIR may name a directory per node (node-local disks seen under one path each, or the
// virtual nodes of a test): this placeholder stands for the rank's node.
inline constexpr std::string_view kNodePlaceholder = "{node}";
std::string expand_node(std::string path, const std::string& node);
bool valid_name(const std::string& text);
// A rank's node when SKT_NODE does not say: Slurm's name for it, or the host name (cut at the
// first dot, characters outside the name set replaced).
std::string default_node_name();
// A job tag is a name, or a sub-job's: the job's name, '+', the sub-job's (skt-hpl's TAG+hpl). A
// user's tag has no '+', so that no sub-job of one job can be another job.
bool valid_job_tag(const std::string& text);

// A job covers its own tag and its sub-jobs', TAG+<name>: the contexts a program derives from its
// tag (skt-hpl's TAG+hpl and TAG+t0, an ensemble member's TAG+w1). A user's tag has no '+', so no
// sub-job of one job is another job.
inline bool job_covers(std::string_view job, std::string_view tag) {
  return tag == job ||
         (tag.size() > job.size() && tag.substr(0, job.size()) == job && tag[job.size()] == '+');
}

}  // namespace skt

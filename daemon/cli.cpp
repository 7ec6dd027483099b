#include "daemon/cli.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <stdexcept>
#include <utility>

#include "daemon/ranklist.hpp"

namespace skt::run {

void validate(const Options& o) {
  if (o.nodes.find_first_of(" \t\n") != std::string::npos) {
    throw std::invalid_argument(
        fmt::format("--nodes '{}': node names are separated by commas, without spaces", o.nodes));
  }
  if (o.ranks_per_node < 1) {
    throw std::invalid_argument(
        fmt::format("--ranks-per-node {}: every node runs at least one rank", o.ranks_per_node));
  }
  if (o.spares && *o.spares < 0) {
    throw std::invalid_argument(
        fmt::format("--spares {}: the number of spare nodes cannot be negative", *o.spares));
  }
  if (o.max_restarts < 0) {
    throw std::invalid_argument(fmt::format(
        "--max-restarts {}: the number of relaunches cannot be negative", o.max_restarts));
  }
  for (const auto& [name, value] : {std::pair{"--backoff", o.backoff},
                                    {"--silence", o.silence},
                                    {"--startup", o.startup},
                                    {"--progress-floor", o.progress_floor},
                                    {"--probe-interval", o.probe_interval},
                                    {"--quarantine", o.quarantine}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      throw std::invalid_argument(
          fmt::format("{} {}: give a finite number of seconds, 0 or more", name, value));
    }
  }
  if (!(o.keep_free_mib >= 0) || !std::isfinite(o.keep_free_mib)) {
    throw std::invalid_argument(
        fmt::format("--keep-free {}: give a finite number of MiB, 0 or more", o.keep_free_mib));
  }
  if (!(o.probe_timeout > 0) || !std::isfinite(o.probe_timeout)) {
    throw std::invalid_argument(
        fmt::format("--probe-timeout {}: give a positive number of seconds", o.probe_timeout));
  }
  if (o.hang_timeout && (!(*o.hang_timeout > 0) || !std::isfinite(*o.hang_timeout))) {
    throw std::invalid_argument(
        fmt::format("--hang-timeout {}: give a positive number of seconds", *o.hang_timeout));
  }
  if (!o.job.empty() && (!valid_node_name(o.job) || o.job.size() > kMaxJobTag)) {
    throw std::invalid_argument(fmt::format(
        "--job '{}': a job tag is 1 to {} letters, digits, '.', '_' or '-', starting with a "
        "letter or digit (a program's sub-jobs add +NAME to it, up to 63 in all)",
        o.job, kMaxJobTag));
  }
}

std::variant<Options, int> parse_command_line(int argc, char** argv) {
  CLI::App app{
      "skt-run: runs an MPI program on a list of nodes and keeps it going: when a run fails, or\n"
      "hangs, it replaces dead nodes with spares (healthy ranks stay on their nodes, where their\n"
      "checkpoints are), or, with no spare left, doubles their ranks up on the live nodes, and\n"
      "relaunches it with the same SKT_JOB, until it succeeds.\n"};
  app.footer(
      "Nodes come from --nodes, --hostfile, or the Slurm allocation (SLURM_JOB_NODELIST); the\n"
      "last --spares of them, or --spare-nodes, are spares. Launch 'local' runs every node as a\n"
      "virtual node of this host (one app context per node, SKT_NODE set, oversubscribed);\n"
      "'hosts' puts rank r on the r-th node of the ranklist (mpirun --host with one entry per\n"
      "rank, --map-by seq), the default inside Slurm or with --hostfile.\n"
      "Every rank gets SKT_JOB, SKT_RESTART, SKT_MONITOR and its key SKT_MONITOR_KEY (new for\n"
      "each launch: what the ranks say is signed with it, and anything else that reaches\n"
      "skt-run's port is ignored), and the SKT_*, OPENBLAS_* and OMP_* variables set here\n"
      "(mpirun -x), however its node starts it. Through SKT_MONITOR the ranks tell skt-run\n"
      "that they live and commit: a run with a rank silent for --silence seconds\n"
      "(stopped, or its node frozen), or without a checkpoint for three times its own interval\n"
      "(at least --progress-floor; or --hang-timeout), is ended and relaunched like a failed one,\n"
      "unless its Slurm job is suspended (then skt-run waits for the resume).\n"
      "A launcher that outlives every rank's exit by --hang-timeout (else --progress-floor) is\n"
      "ended, and the ranks' exit codes are the run's; one stopped (SIGSTOP) for --silence\n"
      "seconds is continued (SIGCONT). Ranks that all reached MPI_Finalize and do not leave it\n"
      "within the same bound (a frozen MPI daemon or node) end the run: relaunched if a context\n"
      "is still open, else exit 8 (the work ended; a relaunch would do it again). So does a rank\n"
      "silent for --silence seconds after its last context ended, before MPI_Finalize.\n"
      "The nodes are probed every --probe-interval seconds while it runs, beside the watchdog.\n"
      "What skt-run knows of a job lives in its state directory (--state-dir; default\n"
      "${XDG_STATE_HOME:-~/.local/state}/skt-run/<job>): the same command resumes a job that was\n"
      "stopped (a signal, --max-restarts, out of spares, skt-run's own death) from its\n"
      "checkpoint, on the nodes it gives now (a requeued Slurm job's new allocation): a rank\n"
      "whose node is no longer given moves to an unused one, as after a node loss. Once the job\n"
      "has a checkpoint, another command, or the same from another directory, is refused (exit\n"
      "2; --new-command resumes with it): the checkpoint is of the computation the last launch\n"
      "made. A resume's first launch gets SKT_RESTART=auto, and so does the first launch of a\n"
      "job without a state whose nodes keep segments of it (skt-shm list on each; each rank is\n"
      "then placed on the node that holds its own): what became of the segments since, no\n"
      "skt-run saw, so the program resumes only a checkpoint of the same command line from the\n"
      "same directory, and refuses another's. One skt-run at a time drives a job; a second one\n"
      "is refused.\n"
      "The job outlives the operator's session: output that cannot be written (a pipe's reader\n"
      "gone, a terminal hung up) goes on in the state directory's 'output'; under nohup, SIGHUP\n"
      "stays ignored (else it stops the job, as SIGINT and SIGTERM do).\n"
      "Exit codes: 0 success (the job's segments removed); 2 bad usage or configuration, here or\n"
      "in the program (its limits and resources too: not retried); 3 the program found its\n"
      "checkpoint unrecoverable; 4 its result failed verification; 5 out of spares (every\n"
      "node of the job dead; a node dead with no spare left under --stop-at-last-spare; too\n"
      "few nodes to resume on); 6 --max-restarts reached; 7 the launcher refused the launch,\n"
      "saying why (not retried; one killed or silent is relaunched); 8 its work ended, but its\n"
      "ranks did not leave the program by themselves (stuck in or stopped before MPI_Finalize,\n"
      "or ended in it: killed, or by a failing launcher; its own code unknown; not retried);\n"
      "9 a relaunch stalled (every rank beat, no checkpoint came) at the epoch the run before\n"
      "it stalled at: a deadlock of the program, or work longer than the bound, that every\n"
      "relaunch would repeat; 128+N stopped by signal N.\n"
      "Every exit says what is left of the job and how to remove it.");
  Options o;
  app.add_option("--nodes", o.nodes, "nodes, comma separated (n1,n2,...)");
  app.add_option("--hostfile", o.hostfile, "a file of node names, one per line")
      ->check(CLI::ExistingFile);
  app.add_option("--ranks-per-node", o.ranks_per_node, "ranks on each node (default 1)");
  app.add_option("--spares", o.spares, "the last N nodes are spares");
  app.add_option("--spare-nodes", o.spare_nodes, "spare nodes, comma separated");
  app.add_flag("!--cold-spares", o.warm_spares,
               "do not reserve memory on the spares: by default, once a run has committed its "
               "first checkpoint, each spare gets, made and written ahead of a failure, the "
               "shared memory of one node's ranks (skt-shm reserve), which ranks relaunched "
               "there take over, so that their recovery does not pay for fresh memory; it holds "
               "that memory while the job runs");
  app.add_flag("!--stop-at-last-spare", o.continue_on_survivors,
               "end with exit 5 when a node dies and no live spare is left: by default the ranks "
               "of the dead node go on the live nodes of the job, doubled up, each on a node that "
               "holds no other member of its group where one does (the log says which groups "
               "share a node, and so which failures the job can no longer survive)");
  app.add_option("--keep-free", o.keep_free_mib,
                 "MiB a live node must keep free, beyond the 1/32 of its memory the library keeps, "
                 "for a rank to be doubled up onto it (and a node that comes back, to be taken "
                 "back): before placing the ranks of a dead node, "
                 "skt-run asks each live node what new segments can take there (skt-shm room) and "
                 "places a rank only where its segments fit; where none fits, it ends with exit 5, "
                 "saying what each node could give, and the checkpoint stays for a later try")
      ->capture_default_str();
  app.add_option("--quarantine", o.quarantine,
                 "seconds a node found dead sits out before it may serve the job again: then, at "
                 "the next probe while a run is up (--probe-interval) or the next failure, if it "
                 "answers the probe and its stale segments of the job are "
                 "removed, it goes back among the spares; one that fails again within this time "
                 "after it came back is not taken back")
      ->capture_default_str();
  app.add_option("--job", o.job,
                 "job tag, stable across relaunches (default: slurm-<job id> in Slurm, else "
                 "run-<hash of the directory, nodes and command>: the same command here is the "
                 "same job)");
  app.add_option("--launch", o.launch,
                 "auto, local (virtual nodes on this host) or hosts (real nodes)");
  app.add_option("--launcher", o.launcher, "the mpirun to use");
  app.add_option("--launcher-args", o.launcher_args, "extra mpirun arguments, split at spaces");
  app.add_option("--probe", o.probe,
                 "slurm, ping, local or cmd:PROGRAM (default: slurm in Slurm, local for virtual "
                 "nodes, else ping)");
  app.add_option("--registry", o.registry,
                 "the local probe's registry (default: the state directory's registry/; or "
                 "SKT_RUN_REGISTRY)");
  app.add_option("--state-dir", o.state_dir, "where the job's state lives (see below)");
  app.add_option("--max-restarts", o.max_restarts, "relaunches allowed (default 5)");
  app.add_option("--backoff", o.backoff,
                 "seconds before the first relaunch, doubled for each next one");
  app.add_option("--silence", o.silence,
                 "seconds a rank may go without a word before its run counts as hung (and its "
                 "launcher may stay stopped before it is continued)")
      ->capture_default_str();
  app.add_option("--startup", o.startup,
                 "seconds every rank has to start before its run counts as hung")
      ->capture_default_str();
  app.add_option("--progress-floor", o.progress_floor,
                 "the least time without a checkpoint that counts as hung, once the job's cadence "
                 "is known; and the time a launcher may outlive every rank's exit")
      ->capture_default_str();
  app.add_option("--hang-timeout", o.hang_timeout,
                 "a run with no checkpoint for this many seconds is hung, whatever its cadence; "
                 "and the time a launcher may outlive every rank's exit");
  app.add_option("--probe-interval", o.probe_interval,
                 "seconds between probes of the nodes while a run is up (default 5; 0: never)");
  app.add_option("--probe-timeout", o.probe_timeout,
                 "seconds a probe program may take for a node before the node counts as dead "
                 "(it is killed then; the nodes are probed side by side), and squeue to say "
                 "whether a silent Slurm job is suspended")
      ->capture_default_str();
  app.add_option("--monitor-host", o.monitor_host,
                 "the address ranks report to (default: this host's name, 127.0.0.1 for virtual "
                 "nodes)");
  app.add_option("--ranklist-out", o.ranklist_out,
                 "also write the ranklist here (it is always in the state directory)");
  app.add_option("--shm-tool", o.shm_tool,
                 "the skt-shm program (default: next to skt-run, or in PATH)");
  app.add_option("--revive", o.revive,
                 "mark this virtual node alive again in the job's registry (after skt-inject), "
                 "and exit");
  app.add_flag("--status", o.status,
               "say where each node of the job is and why (its ranks, a spare, lost and when it "
               "may come back, barred), from the job's state, and exit");
  app.add_flag("--dry-run", o.dry_run,
               "print the launch command (for a job with a state, the resume's), and exit");
  app.add_flag("--fresh-if-unrecoverable", o.fresh_if_unrecoverable,
               "when the program finds its checkpoint unrecoverable (exit 3: neither memory nor "
               "storage could serve), remove the job's segments (and its drained epochs in "
               "$SKT_DRAIN_DIR) and start it afresh instead of stopping");
  app.add_flag("--new-command", o.new_command,
               "resume a job whose last launch ran another command, or in another directory "
               "(refused without it: its checkpoint would be restored into another computation); "
               "for changes that leave the computation as it was");
  app.add_option("command", o.command, "the program and its arguments, after --")->expected(-1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  try {
    validate(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-run: {}\n", e.what());
    return kExitUsage;
  }
  return o;
}

}  // namespace skt::run

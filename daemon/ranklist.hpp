// The restart daemon's planning, as pure functions: which node each rank runs on, how dead nodes
// are replaced by spares, and the launch layouts that say so to mpirun.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace skt::run {

// Node names go into command lines: letters, digits, '.', '_' and '-' only, starting
// with a letter or digit, at most 63 characters.
bool valid_node_name(const std::string& name);

// "n1,n2,n3" or one name per line (a hostfile; '#' starts a comment, a "slots=" word is ignored):
// the names in order. Throws std::invalid_argument on an empty list, a bad name or a duplicate.
std::vector<std::string> parse_node_list(const std::string& text, const std::string& what);

// Rank r runs on node r / ranks_per_node of `nodes`: every node gets ranks_per_node ranks.
std::vector<std::string> initial_ranklist(const std::vector<std::string>& nodes,
                                          int ranks_per_node);

struct Replacement {
  std::vector<std::string> ranklist;                          // the new layout
  std::vector<std::pair<std::string, std::string>> replaced;  // (dead node, spare), in rank order
  std::vector<std::string> spares_left;
  // No spare being left for them: ranks moved onto a node that runs ranks of the job already,
  // (rank, node) in rank order.
  std::vector<std::pair<int, std::string>> doubled_up;
  // Groups that now have two members or more on one node, whose loss would take them together.
  std::vector<int> groups_sharing_a_node;
  bool groups_known = true;  // every rank's group was known to the doubling up
  // Where the memory was checked (NodeRoom): what each live node can still give after the ranks
  // doubled up onto it.
  std::map<std::string, std::uint64_t> room_left;
};

// Every rank on a node in `dead` moves to a spare, one spare per dead node taken from the front of
// `spares` (dead spares are skipped and dropped); every other rank keeps its node. Throws
// OutOfSpares when there are not enough live spares.
class OutOfSpares : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
Replacement replace_dead_nodes(const std::vector<std::string>& ranklist,
                               const std::set<std::string>& dead,
                               const std::vector<std::string>& spares);

// What the live nodes can give the segments of ranks doubled up onto them (skt-shm room on each,
// less what the operator keeps free), and what one rank's segments take.
struct NodeRoom {
  std::map<std::string, std::uint64_t> free;  // bytes, by node; a node not listed said nothing
  std::uint64_t per_rank = 0;
};

// The job goes on when spares run out: the first dead nodes (in rank order) are replaced by the
// live spares as replace_dead_nodes does, and the ranks of the others move, one at a time in rank
// order, onto the live nodes of the layout, each to the one with the fewest ranks that holds no
// member of its group (rank r is in group group_of_rank[r]; -1, or a rank past the list, is a group
// of its own), the first in the layout on a tie; where every live node holds one, to the one with
// the fewest ranks. Given `room`, a rank goes only where room.free still holds room.per_rank, less
// what the ranks placed there before it took. Throws OutOfSpares when no node of the layout lives,
// or when no live node has the room for a rank, naming what each could give.
Replacement continue_on_survivors(const std::vector<std::string>& ranklist,
                                  const std::set<std::string>& dead,
                                  const std::vector<std::string>& spares,
                                  const std::vector<int>& group_of_rank,
                                  const std::optional<NodeRoom>& room = std::nullopt);

// Where the ranks of the `dead` nodes go: spares first, then, with `continue_on_survivors`, the
// live nodes of the layout (continue_on_survivors above); otherwise replace_dead_nodes. After a
// failed launch, and at a resume whose last launch used nodes that are dead still.
Replacement place_after_losses(const std::vector<std::string>& ranklist,
                               const std::set<std::string>& dead,
                               const std::vector<std::string>& spares, bool continue_on_survivors,
                               const std::vector<int>& group_of_rank,
                               const std::optional<NodeRoom>& room);

// A resumed job's layout on the nodes it is given now, `nodes` in order (a requeued Slurm job's
// new allocation, an edited --nodes): a rank keeps its node while it is given (its segments are
// there); the ranks of a node no longer given move together to a given node the layout does not
// use, taken in order, as after a node loss. The given nodes left over are the spares. Throws
// OutOfSpares when too few nodes are given.
Replacement resume_on_nodes(const std::vector<std::string>& ranklist,
                            const std::vector<std::string>& nodes);

// The layout a job had, as its segments on the nodes given now show it, for a resume without
// skt-run's state: `seen[r]` names the node that holds rank r's segments, empty where no given
// node holds any. An unseen rank goes with the first seen rank of its block of ranks_per_node
// (skt-run places a node's ranks together and moves them together); a block with no rank seen was
// on a node no longer given, named "(the node of rank R)" after its first rank, which
// resume_on_nodes then replaces as after a node loss. Nothing when no rank is seen.
std::optional<std::vector<std::string>> layout_of_segments(const std::vector<std::string>& seen,
                                                           int ranks_per_node);

// The ranklist as runs of consecutive ranks on one node, (node, ranks) in rank order: the app
// contexts that start rank r on ranklist[r] with virtual nodes, since mpirun numbers its contexts'
// ranks in order (ranks doubled up onto a node need not follow its own).
std::vector<std::pair<std::string, int>> runs_of_ranks(const std::vector<std::string>& ranklist);

// The most ranks any node of the ranklist runs.
int most_ranks_on_a_node(const std::vector<std::string>& ranklist);

// The distinct nodes of a ranklist, in order of first rank.
std::vector<std::string> nodes_of(const std::vector<std::string>& ranklist);

// The --host list for Open MPI's sequential mapper (--map-by seq): entry r names rank r's node, and
// a node's entries are its slots. Unlike a rankfile it binds no rank to a core (ranks bind as
// mpirun binds them by default), and unlike a hostfile it needs no file and names only the nodes
// it lists, which keeps mpirun's daemons off the allocation's other nodes, the dead ones among
// them.
std::string seq_host_list(const std::vector<std::string>& ranklist);

}  // namespace skt::run

// One ogbg-molpcba graph as TFDS stores it (a tf.train.Example), and the
// padded row of graphs that AlgoPerf's jraph batching makes of several:
// graphs packed in order while a row keeps at most r graphs, 26 r nodes and
// 56 r directed edges, then padded to 26 r + 1 nodes, 56 r edges and r + 1
// graphs (one padding graph with every padding node and edge, its edges from
// its first node to itself, then empty graphs).
//
// Thread safety: functions only.
#ifndef BATCHD_WORKLOADS_OGBG_GRAPH_H_
#define BATCHD_WORKLOADS_OGBG_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/include/batchd/dtype.h"

namespace batchd {
namespace ogbg {

inline constexpr int64_t kNodeFeatures = 9;
inline constexpr int64_t kEdgeFeatures = 3;
inline constexpr int64_t kTasks = 128;
// AlgoPerf's budgets per graph slot of a batch.
inline constexpr int64_t kNodesPerGraph = 26;
inline constexpr int64_t kEdgesPerGraph = 56;

struct Graph {
  int64_t num_nodes = 0;
  int64_t num_edges = 0;            // bonds, each stored once
  std::vector<float> node_feat;     // [n * 9]
  std::vector<float> edge_feat;     // [e * 3]
  std::vector<int64_t> edge_index;  // [e * 2]: (src, dst) pairs
  std::vector<float> labels;        // [128], NaN = missing
};

// Parses and checks one record: every feature present with its length
// (node_feat n*9, edge_feat e*3, edge_index e*2, labels 128) and every edge
// index in [0, n). InvalidArgument saying what is wrong.
absl::StatusOr<Graph> ParseGraph(absl::string_view record);
// The record of a graph (generators and tests).
std::string SerializeGraph(const Graph& g);

// The shapes of a row of r graph slots.
struct RowShape {
  int64_t graphs = 0;  // r
  int64_t nodes() const { return kNodesPerGraph * graphs + 1; }
  int64_t edges() const { return kEdgesPerGraph * graphs; }
  int64_t slots() const { return graphs + 1; }
  // Whether a graph of n nodes and e bonds fits a row on its own.
  bool Fits(int64_t n, int64_t e) const {
    return n <= kNodesPerGraph * graphs && 2 * e <= edges();
  }
};

// The row's tensors, in order: nodes f32 [N, 9], edges f32 [E, 3], senders
// and receivers int32 [E], n_node and n_edge int32 [r + 1], targets f32
// [r + 1, 128], weights uint8 [r + 1, 128].
inline constexpr int kRowTensors = 8;

// Packs: the sizes of a row so far, and whether one more graph fits.
struct RowBudget {
  RowShape shape;
  int64_t graphs = 0, nodes = 0, edges = 0;
  bool Add(int64_t n, int64_t e) {
    if (graphs + 1 > shape.graphs ||
        nodes + n > kNodesPerGraph * shape.graphs ||
        edges + 2 * e > shape.edges()) {
      return false;
    }
    ++graphs;
    nodes += n;
    edges += 2 * e;
    return true;
  }
};

// Writes a padded row of `graphs` (which fit together) into out[0..7]; an
// empty list writes the all-padding row.
void WriteRow(const RowShape& shape, const std::vector<const Graph*>& graphs,
              uint8_t* const* out);

}  // namespace ogbg
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_OGBG_GRAPH_H_

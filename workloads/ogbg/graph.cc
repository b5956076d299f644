// ogbg graphs and rows; see graph.h.
#include "workloads/ogbg/graph.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "workloads/common/tf_example.h"

namespace batchd {
namespace ogbg {
namespace {

template <typename T>
absl::Status Take(std::map<std::string, std::vector<T>>& m, const char* name,
                  std::vector<T>* out) {
  auto it = m.find(name);
  if (it == m.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ogbg: graph has no feature '", name, "'"));
  }
  out->swap(it->second);
  return absl::OkStatus();
}

absl::Status WrongLength(const char* name, size_t got, int64_t want) {
  return absl::InvalidArgumentError(absl::StrCat(
      "ogbg: feature '", name, "' has ", got, " values, want ", want));
}

}  // namespace

absl::StatusOr<Graph> ParseGraph(absl::string_view record) {
  absl::StatusOr<ExampleFeatures> ex = ParseExample(record);
  if (!ex.ok()) return ex.status();
  Graph g;
  std::vector<int64_t> n, e;
  for (absl::Status s :
       {Take(ex->int64s, "num_nodes", &n), Take(ex->int64s, "num_edges", &e),
        Take(ex->int64s, "edge_index", &g.edge_index),
        Take(ex->floats, "node_feat", &g.node_feat),
        Take(ex->floats, "edge_feat", &g.edge_feat),
        Take(ex->floats, "labels", &g.labels)}) {
    if (!s.ok()) return s;
  }
  if (n.size() != 1) return WrongLength("num_nodes", n.size(), 1);
  if (e.size() != 1) return WrongLength("num_edges", e.size(), 1);
  // Bounded so that the products below cannot overflow.
  if (n[0] < 0 || n[0] > (int64_t(1) << 30) || e[0] < 0 ||
      e[0] > (int64_t(1) << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ogbg: num_nodes ", n[0], " or num_edges ", e[0], " out of range"));
  }
  g.num_nodes = n[0];
  g.num_edges = e[0];
  if (int64_t(g.node_feat.size()) != g.num_nodes * kNodeFeatures) {
    return WrongLength("node_feat", g.node_feat.size(),
                       g.num_nodes * kNodeFeatures);
  }
  if (int64_t(g.edge_feat.size()) != g.num_edges * kEdgeFeatures) {
    return WrongLength("edge_feat", g.edge_feat.size(),
                       g.num_edges * kEdgeFeatures);
  }
  if (int64_t(g.edge_index.size()) != g.num_edges * 2) {
    return WrongLength("edge_index", g.edge_index.size(), g.num_edges * 2);
  }
  if (int64_t(g.labels.size()) != kTasks) {
    return WrongLength("labels", g.labels.size(), kTasks);
  }
  for (size_t i = 0; i < g.edge_index.size(); ++i) {
    const int64_t v = g.edge_index[i];
    if (v < 0 || v >= g.num_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("ogbg: edge ", i / 2, " names node ", v,
                       " of a graph of ", g.num_nodes, " nodes"));
    }
  }
  return g;
}

std::string SerializeGraph(const Graph& g) {
  ExampleFeatures f;
  f.int64s["num_nodes"] = {g.num_nodes};
  f.int64s["num_edges"] = {g.num_edges};
  f.int64s["edge_index"] = g.edge_index;
  f.floats["node_feat"] = g.node_feat;
  f.floats["edge_feat"] = g.edge_feat;
  f.floats["labels"] = g.labels;
  return SerializeExample(f);
}

void WriteRow(const RowShape& shape, const std::vector<const Graph*>& graphs,
              uint8_t* const* out) {
  float* nodes = reinterpret_cast<float*>(out[0]);
  float* edges = reinterpret_cast<float*>(out[1]);
  int32_t* senders = reinterpret_cast<int32_t*>(out[2]);
  int32_t* receivers = reinterpret_cast<int32_t*>(out[3]);
  int32_t* n_node = reinterpret_cast<int32_t*>(out[4]);
  int32_t* n_edge = reinterpret_cast<int32_t*>(out[5]);
  float* targets = reinterpret_cast<float*>(out[6]);
  uint8_t* weights = out[7];
  memset(nodes, 0, sizeof(float) * shape.nodes() * kNodeFeatures);
  memset(edges, 0, sizeof(float) * shape.edges() * kEdgeFeatures);
  memset(n_node, 0, sizeof(int32_t) * shape.slots());
  memset(n_edge, 0, sizeof(int32_t) * shape.slots());
  memset(targets, 0, sizeof(float) * shape.slots() * kTasks);
  memset(weights, 0, shape.slots() * kTasks);
  int64_t node = 0, edge = 0, slot = 0;
  for (const Graph* g : graphs) {
    const int64_t n = g->num_nodes, e = g->num_edges;
    memcpy(nodes + node * kNodeFeatures, g->node_feat.data(),
           sizeof(float) * n * kNodeFeatures);
    // Bidirectional: the bonds as stored, then reversed, features twice.
    memcpy(edges + edge * kEdgeFeatures, g->edge_feat.data(),
           sizeof(float) * e * kEdgeFeatures);
    memcpy(edges + (edge + e) * kEdgeFeatures, g->edge_feat.data(),
           sizeof(float) * e * kEdgeFeatures);
    for (int64_t i = 0; i < e; ++i) {
      const int32_t src = int32_t(node + g->edge_index[2 * i]);
      const int32_t dst = int32_t(node + g->edge_index[2 * i + 1]);
      senders[edge + i] = src;
      receivers[edge + i] = dst;
      senders[edge + e + i] = dst;
      receivers[edge + e + i] = src;
    }
    n_node[slot] = int32_t(n);
    n_edge[slot] = int32_t(2 * e);
    for (int64_t t = 0; t < kTasks; ++t) {
      const float v = g->labels[t];
      const bool known = !std::isnan(v);
      targets[slot * kTasks + t] = known ? v : 0.0f;
      weights[slot * kTasks + t] = known ? 1 : 0;
    }
    node += n;
    edge += 2 * e;
    ++slot;
  }
  // The padding graph: every remaining node and edge, its edges from its
  // first node to itself (there is always one: N = 26 r + 1).
  n_node[slot] = int32_t(shape.nodes() - node);
  n_edge[slot] = int32_t(shape.edges() - edge);
  for (int64_t i = edge; i < shape.edges(); ++i) {
    senders[i] = int32_t(node);
    receivers[i] = int32_t(node);
  }
}

}  // namespace ogbg
}  // namespace batchd

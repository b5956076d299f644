// libFuzzer target for an ogbg-molpcba graph record (ParseGraph): any bytes
// give a graph or InvalidArgument, never a crash; a graph that parses and
// fits a row is written into one (every edge index in range, so the row's
// writes stay inside it) and survives a serialize/parse round trip.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "workloads/ogbg/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchd::ogbg;  // NOLINT: the parser under test
  // libFuzzer's own buffer of exactly `size` bytes (see example_fuzz.cc).
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Graph> g = ParseGraph(bytes);
  if (!g.ok()) return 0;
  absl::StatusOr<Graph> again = ParseGraph(SerializeGraph(*g));
  if (!again.ok() || again->num_nodes != g->num_nodes ||
      again->edge_index != g->edge_index) {
    batchd::fuzz::Fail("a graph changed in a serialize/parse round trip");
  }
  const RowShape shape{4};
  if (!shape.Fits(g->num_nodes, g->num_edges)) return 0;
  std::vector<std::vector<uint8_t>> buffers = {
      std::vector<uint8_t>(4 * shape.nodes() * kNodeFeatures),
      std::vector<uint8_t>(4 * shape.edges() * kEdgeFeatures),
      std::vector<uint8_t>(4 * shape.edges()),
      std::vector<uint8_t>(4 * shape.edges()),
      std::vector<uint8_t>(4 * shape.slots()),
      std::vector<uint8_t>(4 * shape.slots()),
      std::vector<uint8_t>(4 * shape.slots() * kTasks),
      std::vector<uint8_t>(shape.slots() * kTasks)};
  std::vector<uint8_t*> out;
  for (auto& b : buffers) out.push_back(b.data());
  const Graph& graph = *g;
  WriteRow(shape, {&graph}, out.data());
  return 0;
}

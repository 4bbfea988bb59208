// The runtime's rewrite of a captured step graph's memset nodes as kernel nodes
// (RuntimeKernels.h, replaceMemsetNodes): the same bytes written, in the same order,
// every edge kept, and no node left that is not a kernel.
#include "RuntimeKernels.h"

#include "GpuTest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kBytes = 8192;

cudaMemsetParams memsetOf(void *dst, unsigned value, unsigned elementSize, size_t width,
                          size_t height = 1, size_t pitch = 0) {
  cudaMemsetParams p{};
  p.dst = dst;
  p.value = value;
  p.elementSize = elementSize;
  p.width = width;
  p.height = height;
  p.pitch = pitch;
  return p;
}

// What a memset of `p` does to `host`, a copy of the device buffer at `base`.
void applyOnHost(std::vector<uint8_t> &host, const uint8_t *base, const cudaMemsetParams &p) {
  for (size_t row = 0; row < p.height; ++row)
    for (size_t i = 0; i < p.width; ++i) {
      uint8_t *element = host.data() + (static_cast<const uint8_t *>(p.dst) - base) +
                         row * p.pitch + i * p.elementSize;
      std::memcpy(element, &p.value, p.elementSize); // little-endian low bytes
    }
}

size_t edgeCount(cudaGraph_t graph) {
  size_t edges = 0;
  EXPECT_EQ(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges), cudaSuccess);
  return edges;
}

std::vector<cudaGraphNode_t> nodesOf(cudaGraph_t graph) {
  size_t count = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  if (count) {
    EXPECT_EQ(cudaGraphGetNodes(graph, nodes.data(), &count), cudaSuccess);
  }
  return nodes;
}

// Each node's count of incoming edges and its type, sorted: the rewrite keeps the
// multiset of in-degrees (every edge moved to the node that replaced its end).
std::vector<std::pair<size_t, cudaGraphNodeType>> inDegrees(cudaGraph_t graph) {
  std::vector<std::pair<size_t, cudaGraphNodeType>> out;
  for (cudaGraphNode_t node : nodesOf(graph)) {
    size_t in = 0;
    cudaGraphNodeType type;
    EXPECT_EQ(cudaGraphNodeGetDependencies(node, nullptr, nullptr, &in), cudaSuccess);
    EXPECT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    out.emplace_back(in, type);
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct DeviceBuffer {
  uint8_t *p = nullptr;
  ~DeviceBuffer() { cudaFree(p); }
};

struct Graph {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec)
      cudaGraphExecDestroy(exec);
    if (g)
      cudaGraphDestroy(g);
  }
};

TEST(GraphRewriteGpu, MemsetNodesBecomeKernelsThatWriteTheSameBytesInOrder) {
  KILN_REQUIRE_GPU();
  DeviceBuffer buffer;
  ASSERT_EQ(cudaMalloc(&buffer.p, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(buffer.p, 0x11, kBytes), cudaSuccess);
  uint8_t *b = buffer.p;
  // A chain in which every memset overwrites part of the one before it and of the head
  // (a lost or reversed edge shows as the wrong value where they overlap), of every
  // element size, 1-D and pitched, and a branch off the head that overlaps only the head.
  const std::vector<cudaMemsetParams> chain = {
      memsetOf(b, 0xDEADBEEFu, 4, 2048),                              // [0, 8192)
      memsetOf(b + 100, 0xA5u, 1, 777),                               // [100, 877)
      memsetOf(b + 512, 0x1234u, 2, 48, /*height=*/20, /*pitch=*/160), // rows in [512, 3648)
      memsetOf(b + 3000, 0x77u, 1, 3000),                             // [3000, 6000)
  };
  const cudaMemsetParams branch = memsetOf(b + 7000, 0xCAFEu, 2, 300); // [7000, 7600)
  Graph graph;
  ASSERT_EQ(cudaGraphCreate(&graph.g, 0), cudaSuccess);
  cudaGraphNode_t previous = nullptr, head = nullptr;
  for (const cudaMemsetParams &p : chain) {
    cudaGraphNode_t node = nullptr;
    ASSERT_EQ(cudaGraphAddMemsetNode(&node, graph.g, previous ? &previous : nullptr,
                                     previous ? 1 : 0, &p),
              cudaSuccess);
    head = head ? head : node;
    previous = node;
  }
  cudaGraphNode_t branchNode = nullptr;
  ASSERT_EQ(cudaGraphAddMemsetNode(&branchNode, graph.g, &head, 1, &branch), cudaSuccess);
  const auto degreesBefore = inDegrees(graph.g);
  const size_t edgesBefore = edgeCount(graph.g);

  size_t replaced = 0;
  ASSERT_EQ(kiln::runtime::replaceMemsetNodes(graph.g, &replaced), cudaSuccess);
  EXPECT_EQ(replaced, chain.size() + 1);
  const auto degreesAfter = inDegrees(graph.g);
  ASSERT_EQ(degreesAfter.size(), degreesBefore.size());
  for (size_t i = 0; i < degreesAfter.size(); ++i) {
    EXPECT_EQ(degreesAfter[i].second, cudaGraphNodeTypeKernel);
    EXPECT_EQ(degreesAfter[i].first, degreesBefore[i].first);
  }
  EXPECT_EQ(edgeCount(graph.g), edgesBefore);

  ASSERT_EQ(cudaGraphInstantiate(&graph.exec, graph.g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(graph.exec, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got(kBytes), want(kBytes, 0x11);
  ASSERT_EQ(cudaMemcpy(got.data(), b, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (const cudaMemsetParams &p : chain)
    applyOnHost(want, b, p);
  applyOnHost(want, b, branch);
  EXPECT_EQ(got, want);
}

TEST(GraphRewriteGpu, GraphWithoutMemsetsIsLeftAlone) {
  KILN_REQUIRE_GPU();
  Graph graph;
  ASSERT_EQ(cudaGraphCreate(&graph.g, 0), cudaSuccess);
  cudaGraphNode_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaGraphAddEmptyNode(&a, graph.g, nullptr, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphAddEmptyNode(&b, graph.g, &a, 1), cudaSuccess);
  size_t replaced = 7;
  ASSERT_EQ(kiln::runtime::replaceMemsetNodes(graph.g, &replaced), cudaSuccess);
  EXPECT_EQ(replaced, 0u);
  EXPECT_EQ(nodesOf(graph.g).size(), 2u);
  EXPECT_EQ(edgeCount(graph.g), 1u);
}

} // namespace

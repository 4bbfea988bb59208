// The runtime's rewrite of a captured step graph's memset nodes as kernel nodes
// (RuntimeKernels.h, replaceMemsetNodes): the same bytes written, in the same order,
// every edge kept, and no node left that is not a kernel.
#include "RuntimeKernels.h"

#include "GpuTest.h"

#include <gtest/gtest.h>

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

std::vector<cudaGraphNodeType> nodeTypes(cudaGraph_t graph) {
  size_t count = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  EXPECT_EQ(cudaGraphGetNodes(graph, nodes.data(), &count), cudaSuccess);
  std::vector<cudaGraphNodeType> types;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    EXPECT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    types.push_back(type);
  }
  return types;
}

TEST(GraphRewriteGpu, MemsetNodesBecomeKernelsThatWriteTheSameBytesInOrder) {
  KILN_REQUIRE_GPU();
  uint8_t *buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(buffer, 0x11, kBytes), cudaSuccess);
  // A chain whose later memsets overwrite parts of the earlier ones (the result shows a
  // lost edge as the wrong value where they overlap), of every element size, 1-D and
  // pitched, and a branch off the chain's head.
  const std::vector<cudaMemsetParams> chain = {
      memsetOf(buffer, 0xDEADBEEFu, 4, 1024),                 // bytes [0, 4096)
      memsetOf(buffer + 100, 0xA5u, 1, 777),                  // inside it
      memsetOf(buffer + 512, 0x1234u, 2, 48, /*height=*/20, /*pitch=*/160),
      memsetOf(buffer + 4000, 0x77u, 1, 3000),                // over the end of the first
  };
  const cudaMemsetParams branch = memsetOf(buffer + 7200, 0xCAFEu, 2, 300);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  cudaGraphNode_t previous = nullptr, head = nullptr;
  for (const cudaMemsetParams &p : chain) {
    cudaGraphNode_t node = nullptr;
    ASSERT_EQ(cudaGraphAddMemsetNode(&node, graph, previous ? &previous : nullptr,
                                     previous ? 1 : 0, &p),
              cudaSuccess);
    head = head ? head : node;
    previous = node;
  }
  cudaGraphNode_t branchNode = nullptr;
  ASSERT_EQ(cudaGraphAddMemsetNode(&branchNode, graph, &head, 1, &branch), cudaSuccess);
  const size_t nodesBefore = nodeTypes(graph).size(), edgesBefore = edgeCount(graph);

  size_t replaced = 0;
  ASSERT_EQ(kiln::runtime::replaceMemsetNodes(graph, &replaced), cudaSuccess);
  EXPECT_EQ(replaced, chain.size() + 1);
  const std::vector<cudaGraphNodeType> types = nodeTypes(graph);
  EXPECT_EQ(types.size(), nodesBefore);
  for (cudaGraphNodeType type : types)
    EXPECT_EQ(type, cudaGraphNodeTypeKernel);
  EXPECT_EQ(edgeCount(graph), edgesBefore);

  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got(kBytes), want(kBytes, 0x11);
  ASSERT_EQ(cudaMemcpy(got.data(), buffer, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (const cudaMemsetParams &p : chain)
    applyOnHost(want, buffer, p);
  applyOnHost(want, buffer, branch);
  EXPECT_EQ(got, want);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(buffer);
}

TEST(GraphRewriteGpu, GraphWithoutMemsetsIsLeftAlone) {
  KILN_REQUIRE_GPU();
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  cudaGraphNode_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaGraphAddEmptyNode(&a, graph, nullptr, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphAddEmptyNode(&b, graph, &a, 1), cudaSuccess);
  size_t replaced = 7;
  ASSERT_EQ(kiln::runtime::replaceMemsetNodes(graph, &replaced), cudaSuccess);
  EXPECT_EQ(replaced, 0u);
  EXPECT_EQ(nodeTypes(graph).size(), 2u);
  EXPECT_EQ(edgeCount(graph), 1u);
  cudaGraphDestroy(graph);
}

} // namespace

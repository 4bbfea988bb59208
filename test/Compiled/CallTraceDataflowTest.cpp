//===- CallTraceDataflowTest.cpp - kiln-call-trace's data-flow comparison --===//
#include "CallTraceDataflow.h"

#include <gtest/gtest.h>

using kiln::calltrace::dataflow;

namespace {

// f writes x, g writes y, h reads both (activation arena addresses).
const std::vector<std::string> kPlan = {"f w0x200000000000", "g w0x200000000100",
                                        "h 0x200000000000 0x200000000100 0x100000000000"};

TEST(CallTraceDataflow, PlacesSwappedCompareEqual) {
  const std::vector<std::string> swapped = {"f w0x200000000100", "g w0x200000000000",
                                            "h 0x200000000100 0x200000000000 0x100000000000"};
  EXPECT_EQ(dataflow(kPlan), dataflow(swapped));
}

TEST(CallTraceDataflow, ReadingTheWrongBufferDiffers) {
  const std::vector<std::string> wrong = {"f w0x200000000100", "g w0x200000000000",
                                          "h 0x200000000000 0x200000000000 0x100000000000"};
  EXPECT_NE(dataflow(kPlan), dataflow(wrong));
}

TEST(CallTraceDataflow, OverwrittenBeforeItsReadDiffers) {
  const std::vector<std::string> overlap = {"f w0x200000000000", "g w0x200000000000",
                                            "h 0x200000000000 0x200000000000 0x100000000000"};
  EXPECT_NE(dataflow(kPlan), dataflow(overlap));
}

TEST(CallTraceDataflow, ViewsReadAtTheirOffset) {
  // A read 64 bytes into what f wrote, in both placements.
  const std::vector<std::string> a = {"f w0x200000000000", "h 0x200000000040"};
  const std::vector<std::string> b = {"f w0x200000001000", "h 0x200000001040"};
  EXPECT_EQ(dataflow(a), dataflow(b));
  EXPECT_EQ(dataflow(a)[1], "h r0+64");
}

TEST(CallTraceDataflow, OtherArgumentsStayAsTheyAre) {
  // Weights, integers and floats are compared as text.
  const std::vector<std::string> a = {"f w0x200000000000 0x100000000000 5 f0x3f800000"};
  const std::vector<std::string> b = {"f w0x200000000000 0x100000000040 5 f0x3f800000"};
  EXPECT_NE(dataflow(a), dataflow(b));
  EXPECT_EQ(dataflow(a)[0], "f w 0x100000000000 5 f0x3f800000");
}

} // namespace

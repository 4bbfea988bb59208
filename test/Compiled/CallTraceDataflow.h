//===- CallTraceDataflow.h - comparing call traces by data flow ----------===//
//
// kiln-call-trace's --activations-may-differ: two traces of runtime calls (one line a
// call: the callee, then its arguments; a pointer the call writes through marked `w`)
// compared by which call wrote the activations each call reads, not by their
// addresses. Header-only so that CallTraceDataflowTest can check it without a model.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TEST_COMPILED_CALLTRACEDATAFLOW_H
#define KILN_TEST_COMPILED_CALLTRACEDATAFLOW_H

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kiln::calltrace {

/// The recording runtime's fake activation arena: [kActivations, kInputs).
constexpr uint64_t kActivations = 0x200000000000, kInputs = 0x300000000000;

/// The activation address that `word` names (0 for any other word), and whether the
/// call writes through it.
inline std::pair<uint64_t, bool> activationOf(const std::string &word) {
  const bool written = word.rfind("w0x", 0) == 0;
  if (!written && word.rfind("0x", 0) != 0)
    return {0, false};
  uint64_t address = std::strtoull(word.c_str() + (written ? 1 : 0), nullptr, 16);
  if (address < kActivations || address >= kInputs)
    return {0, false};
  return {address, written};
}

/// `calls` with every activation address replaced by where its data comes from: `w` where
/// a call writes, `r<i>+<d>` where it reads d bytes into what call i wrote last at or
/// below that address. Two steps whose plans place the buffers differently but pass the
/// same data between the same calls give the same text; one that reads a buffer another
/// call overwrote in between does not. (In a plan without overlapping live buffers, the
/// last write at or below a live buffer's address is its own.)
inline std::vector<std::string> dataflow(const std::vector<std::string> &calls) {
  std::map<uint64_t, size_t> lastWriter;
  std::vector<std::string> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string line;
    std::vector<uint64_t> written;
    size_t start = 0;
    while (start <= calls[i].size()) {
      size_t end = calls[i].find(' ', start);
      if (end == std::string::npos)
        end = calls[i].size();
      std::string word = calls[i].substr(start, end - start);
      auto [address, write] = activationOf(word);
      if (address && write) {
        written.push_back(address);
        word = "w";
      } else if (address) {
        auto it = lastWriter.upper_bound(address);
        word = it == lastWriter.begin()
                   ? std::string("r?")
                   : "r" + std::to_string(std::prev(it)->second) + "+" +
                         std::to_string(address - std::prev(it)->first);
      }
      line += (start ? " " : "") + word;
      start = end + 1;
    }
    for (uint64_t address : written)
      lastWriter[address] = i;
    out.push_back(std::move(line));
  }
  return out;
}

} // namespace kiln::calltrace

#endif

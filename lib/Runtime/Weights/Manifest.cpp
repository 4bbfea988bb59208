// The compiled-model manifest (docs/abi.md): line-based records, strictly validated.
#include "kiln/Runtime/Manifest.h"

#include "Json.h"
#include "kiln/Runtime/Layout.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <unordered_map>

namespace kiln::runtime {
namespace {

constexpr uint64_t kWeightAlignment = 256;

struct ManifestDtype {
  const char *name;
  uint64_t bytes;
};
constexpr ManifestDtype kDtypes[] = {
#define KILN_RT_DTYPE(ENUM, value, name, bytes) {name, bytes},
#include "kiln/Runtime/ABI.def"
};

struct IntKey {
  const char *key;
  int64_t Manifest::*field;
};
constexpr IntKey kIntKeys[] = {
    {"vocab_size", &Manifest::vocabSize},     {"hidden_size", &Manifest::hiddenSize},
    {"num_layers", &Manifest::numLayers},     {"max_batch", &Manifest::maxBatch},
    {"max_seq_len", &Manifest::maxSeqLen},    {"page_size", &Manifest::pageSize},
    {"kv_pages", &Manifest::kvPages},         {"max_step_tokens", &Manifest::maxStepTokens},
    {"max_logit_rows", &Manifest::maxLogitRows}, {"max_draft_len", &Manifest::maxDraftLen},
    {"cuda_graphs", &Manifest::cudaGraphs},
};
struct ByteKey {
  const char *key;
  uint64_t Manifest::*field;
};
constexpr ByteKey kByteKeys[] = {
    {"weight_bytes", &Manifest::weightBytes},         {"cache_bytes", &Manifest::cacheBytes},
    {"speculative_bytes", &Manifest::speculativeBytes}, {"activation_bytes", &Manifest::activationBytes},
    {"workspace_bytes", &Manifest::workspaceBytes},   {"io_bytes", &Manifest::ioBytes},
    {"cuda_graph_bytes", &Manifest::cudaGraphBytes},
};
constexpr size_t kNumInt = sizeof(kIntKeys) / sizeof(kIntKeys[0]);
constexpr size_t kNumByte = sizeof(kByteKeys) / sizeof(kByteKeys[0]);

// Parses a decimal number in [0, max]; on failure `why` says what is wrong with it.
bool parseNumber(std::string_view text, uint64_t max, uint64_t &out, const char *&why) {
  if (text.empty()) {
    why = "is empty";
    return false;
  }
  if (text[0] == '-') {
    why = "is negative";
    return false;
  }
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      why = "is not a decimal number";
      return false;
    }
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (value > (max - d) / 10 || value * 10 + d > max) {
      why = max == std::numeric_limits<uint64_t>::max() ? "does not fit in 64 bits" : "is too large";
      return false;
    }
    value = value * 10 + d;
  }
  out = value;
  return true;
}

// `1,2,4`: ascending batch sizes; on failure `why` says what is wrong.
bool parseBatchList(std::string_view list, std::vector<int32_t> &out, std::string &why) {
  for (size_t start = 0;;) {
    size_t comma = list.find(',', start);
    std::string_view item = list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    uint64_t batch;
    const char *problem;
    if (!parseNumber(item, static_cast<uint64_t>(std::numeric_limits<int32_t>::max()), batch, problem)) {
      why = "'" + std::string(item) + "' " + problem + " (expected all or e.g. 1,2,4)";
      return false;
    }
    if (!out.empty() && static_cast<int32_t>(batch) <= out.back()) {
      why = "batches must be ascending without repeats";
      return false;
    }
    out.push_back(static_cast<int32_t>(batch));
    if (comma == std::string_view::npos)
      return true;
    start = comma + 1;
  }
}

// The `G:P0,P1,...` of a weight's `rows=` field: positive counts, G and at least two
// parts; on failure `why` says what is wrong.
bool parseRowGroups(std::string_view value, std::vector<int64_t> &out, std::string &why) {
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) {
    why = "rows=" + std::string(value) + " is not of the form rows=G:P0,P1,...";
    return false;
  }
  std::vector<std::string_view> items = {value.substr(0, colon)};
  for (size_t start = colon + 1;;) {
    const size_t comma = value.find(',', start);
    items.push_back(value.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                                        : comma - start));
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  for (std::string_view item : items) {
    uint64_t count = 0;
    const char *problem = "is zero";
    if (!parseNumber(item, static_cast<uint64_t>(std::numeric_limits<int32_t>::max()), count,
                     problem) ||
        count == 0) {
      why = "rows: '" + std::string(item) + "' " + problem;
      return false;
    }
    out.push_back(static_cast<int64_t>(count));
  }
  if (out.size() < 3) {
    why = "rows=" + std::string(value) + " needs at least two parts (rows=G:P0,P1,...)";
    return false;
  }
  return true;
}

// The `D0xD1x...` of a weight's `from=` field: positive dimensions; on failure `why` says
// what is wrong.
bool parseFromShape(std::string_view value, std::vector<int64_t> &out, std::string &why) {
  for (size_t start = 0;;) {
    const size_t x = value.find('x', start);
    const std::string_view dimText =
        value.substr(start, x == std::string_view::npos ? std::string_view::npos : x - start);
    uint64_t dim = 0;
    const char *problem = "is zero";
    if (!parseNumber(dimText, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), dim,
                     problem) ||
        dim == 0) {
      why = "from=" + std::string(value) + ": dimension '" + std::string(dimText) + "' " + problem +
            " (the checkpoint's shape, like from=4x1024)";
      return false;
    }
    out.push_back(static_cast<int64_t>(dim));
    if (x == std::string_view::npos)
      return true;
    start = x + 1;
  }
}

std::string dimsText(const std::vector<int64_t> &dims) {
  std::string text;
  for (int64_t d : dims)
    text += (text.empty() ? "" : "x") + std::to_string(d);
  return text;
}

// A weight's `shard=D/P[:S0,S1,...]`, its only field (`fieldCount`): D a dimension of
// its shape (>= 1 on a stack), P in [1, 1024] (a tensor-parallel rank's block of the
// checkpoint tensor), the segments positive and summing to the shape's D.
bool parseShard(std::string_view field, size_t fieldCount, ManifestWeight &w, std::string &why) {
  std::string_view value = field.substr(6), segments;
  if (const size_t colon = value.find(':'); colon != std::string_view::npos) {
    segments = value.substr(colon + 1);
    value = value.substr(0, colon);
  }
  const size_t slash = value.find('/');
  uint64_t dim = 0, parts = 0;
  const char *ignored = nullptr;
  if (slash == std::string_view::npos ||
      !parseNumber(value.substr(0, slash), 64, dim, ignored) ||
      !parseNumber(value.substr(slash + 1), 1 << 20, parts, ignored) || parts < 1) {
    why = std::string(field) +
          " is not of the form shard=D/P[:S0,S1,...] (a dimension, a count >= 1, segments)";
    return false;
  }
  const bool stacked = w.name.find('*') != std::string::npos;
  if (fieldCount != 1) {
    why = std::string(field) + ": a sharded weight takes no other field";
    return false;
  }
  if (dim >= w.shape.size() || parts > 1024) {
    why = std::string(field) + ": dimension " + std::to_string(dim) + " of shape " +
          dimsText(w.shape) + " in " + std::to_string(parts) +
          " parts (a dimension of the shape, at most 1024 parts)";
    return false;
  }
  if (stacked && dim == 0) {
    why = std::string(field) + ": a stacked weight is sharded along a dimension of each "
                               "stacked tensor (D >= 1; dimension 0 indexes '*')";
    return false;
  }
  std::vector<int64_t> sizes;
  if (field.find(':') != std::string_view::npos) {
    uint64_t sum = 0;
    bool ok = !segments.empty();
    while (ok) {
      const size_t comma = segments.find(',');
      uint64_t size = 0;
      ok = parseNumber(segments.substr(0, comma), uint64_t(1) << 40, size, ignored) && size > 0;
      sum += size;
      sizes.push_back(static_cast<int64_t>(size));
      if (comma == std::string_view::npos)
        break;
      segments = segments.substr(comma + 1);
    }
    if (!ok || sum != static_cast<uint64_t>(w.shape[dim])) {
      why = std::string(field) + ": segments must be sizes >= 1 that sum to dimension " +
            std::to_string(dim) + " of shape " + dimsText(w.shape);
      return false;
    }
  }
  w.shardDim = static_cast<int32_t>(dim);
  w.shardParts = static_cast<int32_t>(parts);
  w.shardSegments = std::move(sizes);
  return true;
}

// A weight's optional fields after BYTES (`from=`, `transpose`, `rows=`, `mxfp4`, each at
// most once, in any order) into `w`, checked against its shape of `elements` elements; on
// failure `why` says what is wrong.
bool parseWeightFields(const std::vector<std::string_view> &fields, uint64_t elements,
                       ManifestWeight &w, std::string &why) {
  std::string_view from, rows, transpose, mxfp4, shard;
  for (size_t i = 6; i < fields.size(); ++i) {
    const std::string_view field = fields[i];
    std::string_view *slot = field.substr(0, 5) == "from="    ? &from
                             : field.substr(0, 5) == "rows="  ? &rows
                             : field.substr(0, 6) == "shard=" ? &shard
                             : field == "transpose"           ? &transpose
                             : field == "mxfp4"               ? &mxfp4
                                                              : nullptr;
    if (!slot) {
      why = "unknown field '" + std::string(field) +
            "' (expected from=D0xD1x..., transpose, rows=G:P0,P1,..., mxfp4 or shard=D/P[:S0,...])";
      return false;
    }
    if (!slot->empty()) {
      why = "duplicate field '" +
            std::string(slot == &from || slot == &rows ? field.substr(0, 5)
                        : slot == &shard               ? field.substr(0, 6)
                                                       : field) +
            "' (each field is given at most once)";
      return false;
    }
    *slot = field;
  }
  if (!shard.empty())
    return parseShard(shard, fields.size() - 6, w, why);
  if (fields.size() > 6 && w.name.find('*') != std::string::npos) {
    why = "a stacked weight (a '*' in its name) takes no from=, transpose, rows= or mxfp4: it "
          "loads each expert's checkpoint tensor as it is";
    return false;
  }
  if (!from.empty()) {
    if (!parseFromShape(from.substr(5), w.fromShape, why))
      return false;
    uint64_t fromElements = 1;
    bool overflow = false;
    for (int64_t dim : w.fromShape)
      overflow |= __builtin_mul_overflow(fromElements, static_cast<uint64_t>(dim), &fromElements);
    if (overflow || fromElements != elements) {
      why = std::string(from) + " holds " +
            (overflow ? std::string("more than 2^64") : std::to_string(fromElements)) +
            " elements, shape " + dimsText(w.shape) + " holds " + std::to_string(elements) +
            " (from= is the checkpoint's shape of the same elements)";
      return false;
    }
  }
  if (!mxfp4.empty()) {
    if (w.dtype != "bf16") {
      why = "mxfp4 needs dtype bf16 (the dequantized tensor), not " + w.dtype;
      return false;
    }
    const std::vector<int64_t> &checkpoint = w.fromShape.empty() ? w.shape : w.fromShape;
    if (checkpoint.back() % 32) {
      why = "mxfp4: the last dimension of " +
            std::string(w.fromShape.empty() ? "shape " : "from=") + dimsText(checkpoint) + " is " +
            std::to_string(checkpoint.back()) +
            ", not a multiple of 32 (an MXFP4 block holds 32 values)";
      return false;
    }
    w.mxfp4 = true;
  }
  if (!transpose.empty()) {
    const std::vector<int64_t> &checkpoint = w.fromShape.empty() ? w.shape : w.fromShape;
    if (checkpoint.size() < 2) {
      why = "transpose needs a checkpoint shape of rank >= 2 (" + dimsText(checkpoint) +
            " has rank " + std::to_string(checkpoint.size()) + ")";
      return false;
    }
    w.transpose = true;
  }
  if (!rows.empty()) {
    if (!parseRowGroups(rows.substr(5), w.rowGroups, why))
      return false;
    uint64_t perGroup = 0, units = 0;
    bool overflow = false;
    for (size_t part = 1; part < w.rowGroups.size(); ++part)
      overflow |=
          __builtin_add_overflow(perGroup, static_cast<uint64_t>(w.rowGroups[part]), &perGroup);
    overflow |= __builtin_mul_overflow(static_cast<uint64_t>(w.rowGroups[0]), perGroup, &units);
    if (overflow || elements == 0 || elements % units) {
      why = std::string(rows) + ": " + std::to_string(w.rowGroups[0]) + " groups of " +
            std::to_string(perGroup) + " units must divide the " + std::to_string(elements) +
            " elements of shape " + dimsText(w.shape) + " (into units of equal size)";
      return false;
    }
  }
  return true;
}

std::string lineText(size_t line) { return "line " + std::to_string(line) + ": "; }

struct WeightLine {
  size_t line;
  size_t index;  // in Manifest::weights
};

} // namespace

uint64_t Manifest::totalBytes() const {
  uint64_t total = 0;
  for (uint64_t part : {weightBytes, cacheBytes, activationBytes, workspaceBytes, ioBytes})
    if (__builtin_add_overflow(total, part, &total))
      return std::numeric_limits<uint64_t>::max();
  return total;
}

bool parseManifest(std::string_view text, Manifest &out, std::string &error) {
  error.clear();
  Manifest m;
  size_t intLine[kNumInt] = {}, byteLine[kNumByte] = {}, nameLine = 0, endLine = 0, batchesLine = 0,
         ringLine = 0, ranksLine = 0, collectiveLine = 0;
  std::vector<WeightLine> weightLines;
  std::unordered_map<std::string, size_t> weightLineOf;  // name -> line
  size_t line = 0, pos = 0;
  auto fail = [&](size_t at, const std::string &what) {
    error = lineText(at) + what;
    return false;
  };

  size_t badByte;
  if (!weights::json::validUtf8(text, badByte)) {
    size_t at = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + badByte, '\n'));
    return fail(at, "invalid UTF-8");
  }

  std::vector<std::string_view> fields;
  while (pos < text.size()) {
    ++line;
    size_t eol = text.find('\n', pos);
    std::string_view record = text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    if (endLine)
      return fail(line, "text after 'end' (line " + std::to_string(endLine) + ")");
    if (record.empty())
      return fail(line, "empty line");
    for (char c : record) {
      unsigned char u = static_cast<unsigned char>(c);
      if (u == '\r')
        return fail(line, "carriage return (lines end with \\n alone)");
      if (u < 0x20 || u == 0x7f)
        return fail(line, "control character (fields are separated by single spaces)");
    }
    fields.clear();
    for (size_t start = 0;;) {
      size_t space = record.find(' ', start);
      fields.push_back(record.substr(start, space == std::string_view::npos ? std::string_view::npos : space - start));
      if (fields.back().empty())
        return fail(line, "empty field (fields are separated by single spaces)");
      if (space == std::string_view::npos)
        break;
      start = space + 1;
    }
    std::string_view key = fields[0];
    auto arity = [&](size_t n, const char *form) {
      if (fields.size() == n)
        return true;
      return fail(line, "'" + std::string(key) + "' takes the form '" + form + "' (" +
                            std::to_string(fields.size()) + " fields found)");
    };

    if (line == 1) {
      if (key != "kiln-model")
        return fail(line, "expected 'kiln-model 2' (not a Kiln model manifest)");
      if (!arity(2, "kiln-model VERSION"))
        return false;
      if (fields[1] == "1")
        return fail(line, "manifest version 1: the model was compiled by an older kiln-compile (before the "
                          "CUDA-graph plan); compile it again");
      if (fields[1] != "2")
        return fail(line, "unsupported manifest version '" + std::string(fields[1]) + "' (this runtime reads 2)");
      continue;
    }
    if (key == "kiln-model")
      return fail(line, "'kiln-model' may only be the first line");
    if (key == "end") {
      if (!arity(1, "end"))
        return false;
      endLine = line;
      continue;
    }
    // The first occurrence of a key records its line in `at`; a second is an error.
    auto once = [&](size_t &at) {
      if (at)
        return fail(line, "duplicate '" + std::string(key) + "' (first on line " + std::to_string(at) + ")");
      at = line;
      return true;
    };
    if (key == "name") {
      if (!arity(2, "name NAME") || !once(nameLine))
        return false;
      m.name = std::string(fields[1]);
      continue;
    }
    if (key == "cuda_graph_batches") {
      if (!arity(2, "cuda_graph_batches all|B1,B2,...") || !once(batchesLine))
        return false;
      std::string why;
      if (fields[1] != "all" && !parseBatchList(fields[1], m.cudaGraphBatches, why))
        return fail(line, "cuda_graph_batches: " + why);
      continue;
    }
    if (key == "kv_ring_window") { // optional: models without a ring leave it out
      uint64_t window = 0;
      const char *why = nullptr;
      if (!arity(2, "kv_ring_window TOKENS") || !once(ringLine))
        return false;
      if (!parseNumber(fields[1], std::numeric_limits<int32_t>::max(), window, why))
        return fail(line, std::string("kv_ring_window ") + why);
      m.kvRingWindow = static_cast<int64_t>(window);
      continue;
    }
    if (key == "tp_ranks") { // optional: a whole model leaves it out
      uint64_t ranks = 0;
      const char *why = nullptr;
      if (!arity(2, "tp_ranks N") || !once(ranksLine))
        return false;
      if (!parseNumber(fields[1], 1024, ranks, why) || ranks < 1)
        return fail(line, std::string("tp_ranks ") + (why ? why : "is 0") +
                              " (the tensor-parallel ranks, 1 to 1024)");
      m.tpRanks = static_cast<int64_t>(ranks);
      continue;
    }
    if (key == "collective_bytes") { // optional: a model without collectives leaves it out
      uint64_t bytes = 0;
      const char *why = nullptr;
      if (!arity(2, "collective_bytes BYTES") || !once(collectiveLine))
        return false;
      if (!parseNumber(fields[1], std::numeric_limits<int64_t>::max(), bytes, why))
        return fail(line, std::string("collective_bytes ") + why);
      m.collectiveBytes = bytes;
      continue;
    }
    if (key == "weight") {
      if (fields.size() < 6 &&
          !arity(6, "weight NAME DTYPE SHAPE OFFSET BYTES [from=D0xD1x...] "
                    "[transpose] [rows=G:P0,P1,...] [mxfp4] [shard=D/P[:S0,S1,...]]"))
        return false;
      ManifestWeight w;
      w.name = std::string(fields[1]);
      std::string where = "weight '" + w.name + "': ";
      uint64_t elementBytes = 0;
      for (const ManifestDtype &d : kDtypes)
        if (fields[2] == d.name)
          elementBytes = d.bytes;
      if (!elementBytes) {
        std::string known;
        for (const ManifestDtype &d : kDtypes)
          known += std::string(known.empty() ? "" : ", ") + d.name;
        return fail(line, where + "unknown dtype '" + std::string(fields[2]) + "' (known: " + known + ")");
      }
      w.dtype = std::string(fields[2]);
      std::string_view shape = fields[3];
      uint64_t elements = 1;
      bool overflow = false;
      for (size_t start = 0;;) {
        size_t x = shape.find('x', start);
        std::string_view dimText = shape.substr(start, x == std::string_view::npos ? std::string_view::npos : x - start);
        uint64_t dim;
        const char *why;
        if (!parseNumber(dimText, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), dim, why))
          return fail(line, where + "shape '" + std::string(shape) + "': dimension '" + std::string(dimText) + "' " +
                                why + " (shapes are like 1024x256)");
        w.shape.push_back(static_cast<int64_t>(dim));
        overflow |= __builtin_mul_overflow(elements, dim, &elements);
        if (x == std::string_view::npos)
          break;
        start = x + 1;
      }
      uint64_t expected = 0;
      if (overflow || __builtin_mul_overflow(elements, elementBytes, &expected))
        return fail(line, where + "shape " + std::string(shape) + " of " + w.dtype + " overflows 64 bits");
      const char *why;
      if (!parseNumber(fields[4], std::numeric_limits<uint64_t>::max(), w.offset, why))
        return fail(line, where + "offset '" + std::string(fields[4]) + "' " + why);
      if (!parseNumber(fields[5], std::numeric_limits<uint64_t>::max(), w.bytes, why))
        return fail(line, where + "bytes '" + std::string(fields[5]) + "' " + why);
      if (w.bytes != expected)
        return fail(line, where + "shape " + std::string(shape) + " of " + w.dtype + " is " + std::to_string(expected) +
                              " bytes, not " + std::to_string(w.bytes));
      if (w.offset % kWeightAlignment != 0)
        return fail(line, where + "offset " + std::to_string(w.offset) + " is not " +
                              std::to_string(kWeightAlignment) + "-byte aligned");
      uint64_t endOffset;
      if (__builtin_add_overflow(w.offset, w.bytes, &endOffset))
        return fail(line, where + "offset + bytes overflows 64 bits");
      std::string fieldProblem;
      if (!parseWeightFields(fields, elements, w, fieldProblem))
        return fail(line, where + fieldProblem);
      auto [first, added] = weightLineOf.emplace(w.name, line);
      if (!added)
        return fail(line, "duplicate weight '" + w.name + "' (first on line " + std::to_string(first->second) + ")");
      weightLines.push_back({line, m.weights.size()});
      m.weights.push_back(std::move(w));
      continue;
    }
    bool known = false;
    for (size_t i = 0; i < kNumInt && !known; ++i) {
      if (key != kIntKeys[i].key)
        continue;
      known = true;
      if (!arity(2, "KEY NUMBER") || !once(intLine[i]))
        return false;
      uint64_t value;
      const char *why;
      if (!parseNumber(fields[1], static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), value, why))
        return fail(line, std::string(key) + ": '" + std::string(fields[1]) + "' " + why);
      m.*(kIntKeys[i].field) = static_cast<int64_t>(value);
    }
    for (size_t i = 0; i < kNumByte && !known; ++i) {
      if (key != kByteKeys[i].key)
        continue;
      known = true;
      if (!arity(2, "KEY BYTES") || !once(byteLine[i]))
        return false;
      const char *why;
      if (!parseNumber(fields[1], std::numeric_limits<uint64_t>::max(), m.*(kByteKeys[i].field), why))
        return fail(line, std::string(key) + ": '" + std::string(fields[1]) + "' " + why);
    }
    if (!known)
      return fail(line, "unknown key '" + std::string(key) + "'");
  }

  if (line == 0)
    return fail(1, "empty manifest (expected 'kiln-model 2')");
  if (!endLine)
    return fail(line, "no 'end' line (the manifest is truncated)");
  if (!nameLine)
    return fail(endLine, "missing 'name'");
  for (size_t i = 0; i < kNumInt; ++i)
    if (!intLine[i])
      return fail(endLine, std::string("missing '") + kIntKeys[i].key + "'");
  for (size_t i = 0; i < kNumByte; ++i)
    if (!byteLine[i])
      return fail(endLine, std::string("missing '") + kByteKeys[i].key + "'");
  if (!batchesLine)
    return fail(endLine, "missing 'cuda_graph_batches'");
  for (int32_t batch : m.cudaGraphBatches)
    if (batch < 1 || batch > m.maxBatch)
      return fail(batchesLine, "cuda_graph_batches: batch " + std::to_string(batch) + " outside [1, max_batch " +
                                   std::to_string(m.maxBatch) + "]");
  if (m.cudaGraphs > KILN_RT_MAX_GRAPHS)
    return fail(intLine[kNumInt - 1] /* cuda_graphs */, "cuda_graphs " + std::to_string(m.cudaGraphs) + " > " +
                                                          std::to_string(KILN_RT_MAX_GRAPHS) + " step shapes");
  if (m.speculativeBytes > m.cacheBytes)
    return fail(byteLine[2] /* speculative_bytes */, "speculative_bytes " + std::to_string(m.speculativeBytes) +
                                 " exceeds cache_bytes " + std::to_string(m.cacheBytes) + " (it is a part of them)");
  uint64_t total = 0;
  for (uint64_t part : {m.weightBytes, m.cacheBytes, m.activationBytes, m.workspaceBytes, m.ioBytes})
    if (__builtin_add_overflow(total, part, &total))
      return fail(endLine, "weight + cache + activation + workspace + io bytes overflow 64 bits");

  // Every weight inside weight_bytes, none overlapping another.
  for (const WeightLine &wl : weightLines) {
    const ManifestWeight &w = m.weights[wl.index];
    if (w.offset + w.bytes > m.weightBytes)  // no overflow: checked per line
      return fail(wl.line, "weight '" + w.name + "' [" + std::to_string(w.offset) + ", " +
                               std::to_string(w.offset + w.bytes) + ") lies outside weight_bytes " +
                               std::to_string(m.weightBytes));
  }
  std::vector<WeightLine> byOffset;
  for (const WeightLine &wl : weightLines)
    if (m.weights[wl.index].bytes)
      byOffset.push_back(wl);
  std::sort(byOffset.begin(), byOffset.end(), [&](const WeightLine &a, const WeightLine &b) {
    const ManifestWeight &wa = m.weights[a.index], &wb = m.weights[b.index];
    return wa.offset != wb.offset ? wa.offset < wb.offset : a.line < b.line;
  });
  for (size_t i = 1; i < byOffset.size(); ++i) {
    const ManifestWeight &prev = m.weights[byOffset[i - 1].index], &cur = m.weights[byOffset[i].index];
    if (prev.offset + prev.bytes > cur.offset) {
      size_t later = std::max(byOffset[i - 1].line, byOffset[i].line);
      size_t earlier = std::min(byOffset[i - 1].line, byOffset[i].line);
      return fail(later, "weights '" + prev.name + "' [" + std::to_string(prev.offset) + ", " +
                             std::to_string(prev.offset + prev.bytes) + ") and '" + cur.name + "' [" +
                             std::to_string(cur.offset) + ", " + std::to_string(cur.offset + cur.bytes) +
                             ") overlap (the other is on line " + std::to_string(earlier) + ")");
    }
  }
  out = std::move(m);
  return true;
}

} // namespace kiln::runtime

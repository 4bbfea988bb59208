//===- RollLayers.cpp - kiln-roll-layers -----------------------------------===//
//
// A lowered step is fully unrolled: each decoder layer repeats the same runtime calls,
// and only constants differ (byte offsets into the weight and activation arenas, the
// layer index, KV offsets). Everything after this pass — the LLVM conversion, the
// translation and code generation — is linear in the size of the function, so a
// 4,096-layer model spent most of its compile time there. This pass rolls the layers
// into one loop over a constant table of the values that differ, so those stages see
// one copy of a layer. It is a code-size transformation only: the loop makes the same
// calls with the same arguments in the same order.
//
// Segment i is the ops after layer anchor i up to and including anchor i+1 (anchors:
// calls marked `kiln.layer`, the calls of cached ops). Before they are compared each
// segment gets its own copy of the pure ops it uses from outside (views over the
// arenas, sizes, constants): the residual stream of a layer is a view defined by the
// layer before, and without the copies no two segments would look alike.
//
//===----------------------------------------------------------------------===//
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/LoopInvariantCodeMotionUtils.h"

namespace kiln {
#define GEN_PASS_DEF_KILNROLLLAYERS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// Where an op of the entry block lies: before the first segment, in segment N, or
/// after the last one.
constexpr int kPrologue = -1;

/// Longest chain of pure ops copied for one operand. The views a layer takes from the
/// one before are two or three ops deep; a longer chain means values computed across
/// layers, which copying would make quadratic.
constexpr unsigned kMaxChainDepth = 16;

/// Longest layer pattern rolled as one loop body: a hybrid's repeating group of layers
/// (Nemotron-H's Mamba, MoE and attention layers) rolls as groups of up to this many
/// layer segments.
constexpr unsigned kMaxPeriod = 16;

/// Runs rolled in one function at most (each a loop and a table).
constexpr unsigned kMaxRuns = 8;

/// The run of layer segments to roll: `count` groups of `period` consecutive segments
/// from segment `start`, every group equal to the first.
struct Run {
  unsigned start = 0, period = 1, count = 1;
  unsigned end() const { return start + period * count; }
  unsigned segments() const { return period * count; }
};

/// The first call of each layer (calls of one layer share its mark).
SmallVector<Operation *> findAnchors(Block &block) {
  SmallVector<Operation *> anchors;
  std::optional<int64_t> last;
  for (Operation &op : block) {
    auto layer = op.getAttrOfType<IntegerAttr>(KilnDialect::kLayerAttrName);
    if (!layer || (last && *last == layer.getInt()))
      continue;
    last = layer.getInt();
    anchors.push_back(&op);
  }
  return anchors;
}

/// An op that may be copied freely: no effects, no regions, no control flow.
bool isRematerializable(Operation *op) {
  return op->getNumRegions() == 0 && op->getNumSuccessors() == 0 &&
         !op->hasTrait<OpTrait::IsTerminator>() && isMemoryEffectFree(op);
}

/// The per-layer rolling of one function's entry block. Every change before `commit`
/// is recorded so that `undo` restores the function exactly.
class LayerRoller {
public:
  LayerRoller(Block &block, ArrayRef<Operation *> anchors)
      : block(block), anchors(anchors.begin(), anchors.end()) {}

  /// Copies into every segment the pure ops it uses from outside it.
  LogicalResult localizeSegments();
  /// The longest run of equal groups of consecutive segments (groups of 1 to kMaxPeriod
  /// segments, anywhere in the step; the shorter period on a tie), found by the
  /// segments' op-name signatures and confirmed op by op; `count` 1 when none repeats.
  Run findRun();
  /// Copies into the ops after the run the pure values they take from it; fails when a
  /// value of the run that is not pure escapes its group.
  LogicalResult localizeAfter(const Run &run, std::string &why);
  /// Replaces the run with a loop; returns the table's column count.
  FailureOr<unsigned> roll(const Run &run, ModuleOp module, StringRef tableName,
                           std::string &why);
  /// Erases every copy made so far (they only duplicate existing values).
  void undo();

private:
  int segmentOf(Operation *op) const {
    auto it = segment.find(op);
    return it == segment.end() ? kPrologue : it->second;
  }
  void numberOps();
  FailureOr<Value> localize(Value value, int target, Operation *before,
                            function_ref<bool(Operation *)> shouldCopy, unsigned depth);
  SmallVector<Operation *> opsOf(unsigned index) const;
  /// The ops of segments [first, first + count).
  SmallVector<Operation *> opsOf(unsigned first, unsigned count) const;
  bool sameShape(Operation *a, Operation *b, const DenseMap<Operation *, unsigned> &posA,
                 const DenseMap<Operation *, unsigned> &posB) const;
  /// Whether the groups of `period` segments from segments a and b match op by op.
  bool sameGroups(unsigned a, unsigned b, unsigned period) const;
  /// Whether a value of segments [first, first + count) is used outside them.
  bool escapes(unsigned first, unsigned count) const;

  Block &block;
  SmallVector<Operation *> anchors;
  /// Segment of each op after the first anchor (the ops after the last anchor get
  /// segments().size(), the epilogue).
  DenseMap<Operation *, int> segment;
  /// The value a copy was made from (copies of copies map to the first value).
  DenseMap<Value, Value> origin;
  /// Per target segment: copies already made, by origin.
  DenseMap<std::pair<int, Value>, Value> copies;
  SmallVector<Operation *> made;
};

unsigned numSegments(ArrayRef<Operation *> anchors) { return anchors.size() - 1; }

void LayerRoller::numberOps() {
  segment.clear();
  int index = 0;
  for (Operation *op = anchors.front()->getNextNode(); op; op = op->getNextNode()) {
    segment[op] = index;
    if (index < static_cast<int>(numSegments(anchors)) && op == anchors[index + 1])
      ++index;
  }
}

SmallVector<Operation *> LayerRoller::opsOf(unsigned index) const {
  SmallVector<Operation *> ops;
  for (Operation *op = anchors[index]->getNextNode();; op = op->getNextNode()) {
    ops.push_back(op);
    if (op == anchors[index + 1])
      return ops;
  }
}

SmallVector<Operation *> LayerRoller::opsOf(unsigned first, unsigned count) const {
  SmallVector<Operation *> ops;
  for (unsigned index = first; index < first + count; ++index)
    llvm::append_range(ops, opsOf(index));
  return ops;
}

/// `value` as seen from segment `target`: itself, or a copy placed before `before`
/// when its defining op is pure and `shouldCopy` says it comes from elsewhere.
FailureOr<Value> LayerRoller::localize(Value value, int target, Operation *before,
                                       function_ref<bool(Operation *)> shouldCopy,
                                       unsigned depth) {
  Operation *def = value.getDefiningOp();
  if (!def || !shouldCopy(def) || !isRematerializable(def))
    return value;
  if (depth > kMaxChainDepth)
    return failure();
  Value key = origin.lookup(value);
  if (!key)
    key = value;
  if (Value existing = copies.lookup({target, key}))
    return existing;
  IRMapping mapping;
  for (Value operand : def->getOperands()) {
    FailureOr<Value> local = localize(operand, target, before, shouldCopy, depth + 1);
    if (failed(local))
      return failure();
    mapping.map(operand, *local);
  }
  OpBuilder builder(before);
  Operation *copy = builder.clone(*def, mapping);
  made.push_back(copy);
  segment[copy] = target;
  for (auto [from, to] : llvm::zip(def->getResults(), copy->getResults())) {
    Value first = origin.lookup(from);
    origin[to] = first ? first : from;
    copies[{target, origin[to]}] = to;
  }
  return copy->getResult(cast<OpResult>(value).getResultNumber());
}

LogicalResult LayerRoller::localizeSegments() {
  numberOps();
  for (unsigned index = 0; index < numSegments(anchors); ++index) {
    int target = index;
    auto elsewhere = [&](Operation *def) { return segmentOf(def) != target; };
    for (Operation *op : opsOf(index))
      for (OpOperand &operand : op->getOpOperands()) {
        FailureOr<Value> local = localize(operand.get(), target, op, elsewhere, 0);
        if (failed(local))
          return failure();
        operand.set(*local);
      }
  }
  return success();
}

/// Attributes equal but for the layer mark and, on constants, the value. Slow (it
/// builds the dictionaries): only for the few ops whose properties or discardable
/// attributes differ.
bool sameAttributesButConstants(Operation *a, Operation *b) {
  Attribute valueA, valueB;
  bool constants = matchPattern(a, m_Constant(&valueA)) && matchPattern(b, m_Constant(&valueB));
  ArrayRef<NamedAttribute> attrsA = a->getAttrDictionary().getValue();
  ArrayRef<NamedAttribute> attrsB = b->getAttrDictionary().getValue();
  if (attrsA.size() != attrsB.size())
    return false;
  for (auto [x, y] : llvm::zip(attrsA, attrsB)) {
    if (x.getName() != y.getName())
      return false;
    if (x.getValue() == y.getValue() || x.getName() == KilnDialect::kLayerAttrName)
      continue;
    if (!constants || x.getValue() != valueA || y.getValue() != valueB)
      return false;
  }
  return true;
}

/// Same op, attributes equal but for constants' values and the layer mark, operands
/// from the same relative position or the same outside value.
bool LayerRoller::sameShape(Operation *a, Operation *b,
                            const DenseMap<Operation *, unsigned> &posA,
                            const DenseMap<Operation *, unsigned> &posB) const {
  if (a->getName() != b->getName() || a->getNumOperands() != b->getNumOperands() ||
      a->getResultTypes() != b->getResultTypes() || a->getNumRegions() != 0 ||
      b->getNumRegions() != 0 || a->getNumSuccessors() != 0 || b->getNumSuccessors() != 0)
    return false;
  bool sameAttributes =
      a->getDiscardableAttrDictionary() == b->getDiscardableAttrDictionary() &&
      a->getName().compareOpProperties(a->getPropertiesStorage(), b->getPropertiesStorage());
  if (!sameAttributes && !sameAttributesButConstants(a, b))
    return false;
  for (auto [x, y] : llvm::zip(a->getOperands(), b->getOperands())) {
    Operation *defA = x.getDefiningOp();
    Operation *defB = y.getDefiningOp();
    auto inA = defA ? posA.find(defA) : posA.end();
    if (inA == posA.end()) {
      if (x != y)
        return false; // an outside value must be the same for every segment
      continue;
    }
    auto inB = defB ? posB.find(defB) : posB.end();
    if (inB == posB.end() || inA->second != inB->second ||
        cast<OpResult>(x).getResultNumber() != cast<OpResult>(y).getResultNumber())
      return false;
  }
  return true;
}

bool LayerRoller::sameGroups(unsigned a, unsigned b, unsigned period) const {
  SmallVector<Operation *> first = opsOf(a, period), other = opsOf(b, period);
  if (first.size() != other.size())
    return false;
  DenseMap<Operation *, unsigned> posFirst, posOther;
  for (auto [i, op] : llvm::enumerate(first))
    posFirst[op] = i;
  for (auto [i, op] : llvm::enumerate(other))
    posOther[op] = i;
  return llvm::all_of(llvm::seq<size_t>(0, first.size()), [&](size_t i) {
    return sameShape(first[i], other[i], posFirst, posOther);
  });
}

/// What must be equal in equal segments, cheaply: each op's name and result types, and a
/// call's callee (a hybrid's layers differ in the runtime calls they make).
llvm::hash_code signatureOf(ArrayRef<Operation *> ops) {
  llvm::hash_code h = llvm::hash_value(ops.size());
  for (Operation *op : ops) {
    h = llvm::hash_combine(h, op->getName().getAsOpaquePointer(),
                           llvm::hash_combine_range(op->getResultTypes().begin(),
                                                    op->getResultTypes().end()));
    if (auto call = dyn_cast<CallOpInterface>(op))
      if (auto callee = dyn_cast<SymbolRefAttr>(call.getCallableForCallee()))
        h = llvm::hash_combine(h, callee.getAsOpaquePointer());
  }
  return h;
}

Run LayerRoller::findRun() {
  numberOps();
  const unsigned n = numSegments(anchors);
  // Equal groups have equal signatures: the search over every period and start compares
  // those, then each candidate run, longest first, is confirmed op by op (it ends at the
  // first group that differs from its first) until no candidate left can be longer.
  SmallVector<llvm::hash_code> signature;
  for (unsigned index = 0; index < n; ++index)
    signature.push_back(signatureOf(opsOf(index)));
  auto sameSignatures = [&](unsigned a, unsigned b, unsigned period) {
    return llvm::equal(ArrayRef(signature).slice(a, period), ArrayRef(signature).slice(b, period));
  };
  SmallVector<Run> candidates;
  for (unsigned period = 1; period <= std::min(kMaxPeriod, n / 2); ++period)
    for (unsigned start = 0; start + 2 * period <= n;) {
      Run run{start, period, 1};
      while (run.end() + period <= n && sameSignatures(start, run.end(), period))
        ++run.count;
      if (run.count > 1)
        candidates.push_back(run);
      start = run.count > 1 ? run.end() : start + 1;
    }
  // Longest first; on a tie the shorter period (a smaller loop body), then the earlier.
  llvm::stable_sort(candidates, [](const Run &a, const Run &b) {
    return a.segments() != b.segments() ? a.segments() > b.segments() : a.period < b.period;
  });
  Run best;
  for (Run run : candidates) {
    if (run.segments() <= best.segments())
      break;
    unsigned confirmed = 1;
    while (confirmed < run.count &&
           sameGroups(run.start, run.start + confirmed * run.period, run.period))
      ++confirmed;
    run.count = confirmed;
    if (run.count > 1 && run.segments() > best.segments())
      best = run;
  }
  return best;
}

bool LayerRoller::escapes(unsigned first, unsigned count) const {
  auto inside = [&](Operation *user) {
    int at = segmentOf(user);
    return at >= static_cast<int>(first) && at < static_cast<int>(first + count);
  };
  for (Operation *op : opsOf(first, count))
    for (Operation *user : op->getUsers())
      if (!inside(user))
        return true;
  return false;
}

LogicalResult LayerRoller::localizeAfter(const Run &run, std::string &why) {
  int after = static_cast<int>(numSegments(anchors)) + 1; // a target of its own
  auto inRun = [&](Operation *def) {
    int at = segmentOf(def);
    return at >= static_cast<int>(run.start) && at < static_cast<int>(run.end());
  };
  for (Operation *op = anchors[run.end()]->getNextNode(); op; op = op->getNextNode())
    for (OpOperand &operand : op->getOpOperands()) {
      FailureOr<Value> local = localize(operand.get(), after, op, inRun, 0);
      if (failed(local)) {
        why = "a chain of pure ops too long to copy leaves the rolled layers";
        return failure();
      }
      operand.set(*local);
    }
  for (unsigned group = 0; group < run.count; ++group) {
    const unsigned first = run.start + group * run.period;
    if (escapes(first, run.period)) {
      why = "a value of layer segment " + std::to_string(first) +
            (run.period > 1 ? " (a group of " + std::to_string(run.period) + ")" : "") +
            " that is not pure is used outside it";
      return failure();
    }
  }
  return success();
}

void LayerRoller::undo() {
  for (Operation *copy : llvm::reverse(made)) {
    for (Value result : copy->getResults())
      result.replaceAllUsesWith(origin.lookup(result));
    copy->erase();
  }
  made.clear();
  origin.clear();
  copies.clear();
}

/// A constant's bits as a table entry (integers and indices sign-extended, floats as
/// their bit pattern), or nothing for a type the table cannot hold.
std::optional<int64_t> tableEntry(Attribute value) {
  if (auto integer = dyn_cast<IntegerAttr>(value)) {
    if (integer.getValue().getBitWidth() > 64)
      return std::nullopt;
    return integer.getValue().getSExtValue();
  }
  if (auto real = dyn_cast<FloatAttr>(value)) {
    APInt bits = real.getValue().bitcastToAPInt();
    if (bits.getBitWidth() > 64)
      return std::nullopt;
    return static_cast<int64_t>(bits.getZExtValue());
  }
  return std::nullopt;
}

/// The i64 `entry` as a value of `type` (the inverse of tableEntry).
Value fromTableEntry(OpBuilder &builder, Location loc, Value entry, Type type) {
  if (type.isIndex())
    return arith::IndexCastOp::create(builder, loc, type, entry);
  unsigned width = type.getIntOrFloatBitWidth();
  Value bits = entry;
  if (width < 64)
    bits = arith::TruncIOp::create(builder, loc, builder.getIntegerType(width), entry);
  if (isa<FloatType>(type))
    return arith::BitcastOp::create(builder, loc, type, bits);
  return bits;
}

/// A position of segment 0 holding a constant that differs between the rolled
/// segments, with its table entry for each of them.
struct Column {
  unsigned position;
  SmallVector<int64_t> values;
};

/// The columns of the table; fails on a differing constant the table cannot hold.
FailureOr<SmallVector<Column>> findColumns(ArrayRef<SmallVector<Operation *>> segments) {
  SmallVector<Column> columns;
  for (unsigned position = 0; position < segments[0].size(); ++position) {
    SmallVector<Attribute> values;
    for (const SmallVector<Operation *> &ops : segments) {
      Attribute value;
      if (!matchPattern(ops[position], m_Constant(&value)))
        break;
      values.push_back(value);
    }
    if (values.size() != segments.size() || llvm::all_equal(values))
      continue;
    if (!segments[0][position]->getResult(0).getType().isIntOrIndexOrFloat())
      return failure();
    Column column{position, {}};
    for (Attribute value : values) {
      std::optional<int64_t> entry = tableEntry(value);
      if (!entry)
        return failure();
      column.values.push_back(*entry);
    }
    columns.push_back(std::move(column));
  }
  return columns;
}

/// `llvm.mlir.global internal constant` of i64: row r, column c at r * columns + c.
LLVM::GlobalOp buildTable(ModuleOp module, Location loc, StringRef name,
                          ArrayRef<Column> columns, unsigned rows) {
  Type i64 = IntegerType::get(module.getContext(), 64);
  SmallVector<int64_t> entries(rows * columns.size(), 0);
  for (auto [c, column] : llvm::enumerate(columns))
    for (unsigned r = 0; r < rows; ++r)
      entries[r * columns.size() + c] = column.values[r];
  auto arrayType = LLVM::LLVMArrayType::get(i64, entries.size());
  auto tensorType = RankedTensorType::get({static_cast<int64_t>(entries.size())}, i64);
  SymbolTable symbols(module);
  OpBuilder builder(module.getContext()); // detached: the symbol table places it
  auto table = LLVM::GlobalOp::create(builder, loc, arrayType, /*isConstant=*/true,
                                      LLVM::Linkage::Internal, name,
                                      DenseElementsAttr::get(tensorType, ArrayRef(entries)));
  symbols.insert(table, module.getBody()->end()); // renamed if the name is taken
  return table;
}

/// Maps every column's constant of segment 0 to its entry loaded from row `row`.
void loadRow(OpBuilder &builder, Location loc, LLVM::GlobalOp table, Value row,
             ArrayRef<Column> columns, ArrayRef<Operation *> first, IRMapping &mapping) {
  Type i64 = builder.getI64Type();
  Type ptr = LLVM::LLVMPointerType::get(builder.getContext());
  Value rowStart = arith::MulIOp::create(
      builder, loc, arith::IndexCastOp::create(builder, loc, i64, row),
      arith::ConstantIntOp::create(builder, loc, i64, columns.size()));
  Value base = LLVM::AddressOfOp::create(builder, loc, ptr, table.getSymName());
  for (auto [c, column] : llvm::enumerate(columns)) {
    Value constant = first[column.position]->getResult(0);
    Value at = arith::AddIOp::create(builder, loc, rowStart,
                                     arith::ConstantIntOp::create(builder, loc, i64, c));
    Value address = LLVM::GEPOp::create(builder, loc, ptr, i64, base, ValueRange{at});
    Value entry = LLVM::LoadOp::create(builder, loc, i64, address);
    mapping.map(constant, fromTableEntry(builder, loc, entry, constant.getType()));
  }
}

FailureOr<unsigned> LayerRoller::roll(const Run &run, ModuleOp module, StringRef tableName,
                                      std::string &why) {
  // One loop iteration a group; "segments" below are the groups.
  SmallVector<SmallVector<Operation *>> segments;
  for (unsigned group = 0; group < run.count; ++group)
    segments.push_back(opsOf(run.start + group * run.period, run.period));
  FailureOr<SmallVector<Column>> columns = findColumns(segments);
  if (failed(columns)) {
    why = "a constant that differs between layers has no table form";
    return failure();
  }

  // The loop, where segment 0 was; its body is segment 0 with the columns loaded.
  Location loc = anchors[run.start + 1]->getLoc();
  OpBuilder builder(segments[0].front());
  auto loop = scf::ForOp::create(builder, loc, arith::ConstantIndexOp::create(builder, loc, 0),
                                 arith::ConstantIndexOp::create(builder, loc, run.count),
                                 arith::ConstantIndexOp::create(builder, loc, 1));
  builder.setInsertionPoint(loop.getBody()->getTerminator());
  IRMapping mapping;
  if (!columns->empty())
    loadRow(builder, loc, buildTable(module, loc, tableName, *columns, run.count),
            loop.getInductionVar(), *columns, segments[0], mapping);
  for (Operation *op : segments[0]) {
    if (op->getNumResults() == 1 && mapping.contains(op->getResult(0)))
      continue; // a column: its value comes from the table
    Operation *copy = builder.clone(*op, mapping);
    copy->removeAttr(KilnDialect::kLayerAttrName); // the layer differs per iteration
  }
  for (SmallVector<Operation *> &ops : llvm::reverse(segments))
    for (Operation *op : llvm::reverse(ops))
      op->erase();
  moveLoopInvariantCode(cast<LoopLikeOpInterface>(loop.getOperation()));
  return static_cast<unsigned>(columns->size());
}

/// Erases pure ops left without users (the originals of the copies).
void eraseDeadPureOps(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (op.use_empty() && isRematerializable(&op))
      op.erase();
}

unsigned countOps(Operation *root) {
  unsigned count = 0;
  root->walk([&](Operation *) { ++count; });
  return count;
}

struct KilnRollLayersPass : public kiln::impl::KilnRollLayersBase<KilnRollLayersPass> {
  using KilnRollLayersBase::KilnRollLayersBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> functions;
    for (auto fn : module.getOps<func::FuncOp>())
      if (!fn.isExternal())
        functions.push_back(fn);
    // A step may hold several runs (an irregular hybrid pattern, a draft module's layers
    // after the target's): each round rolls the longest run left, until none is.
    for (func::FuncOp fn : functions)
      for (unsigned round = 0; round < kMaxRuns && rollFunction(module, fn, round == 0); ++round)
        ;
  }

  void remark(func::FuncOp fn, const Twine &message) {
    if (emitRemarks)
      fn.emitRemark() << message;
  }

  /// Rolls the longest run of `fn`'s step that is left; false when there is none (said
  /// in a remark when `first`: nothing of the step rolled).
  bool rollFunction(ModuleOp module, func::FuncOp fn, bool first) {
    auto notRolled = [&](const Twine &why) {
      if (first)
        remark(fn, "not rolled: " + why);
      return false;
    };
    Block &block = fn.getBody().front();
    SmallVector<Operation *> anchors = findAnchors(block);
    if (anchors.size() < 3)
      return notRolled("fewer than two layer segments");
    unsigned before = countOps(fn);
    LayerRoller roller(block, anchors);
    std::string why;
    if (failed(roller.localizeSegments())) {
      roller.undo();
      return notRolled("a chain of pure ops too long to copy into a layer");
    }
    Run run = roller.findRun();
    if (run.count < 2) {
      roller.undo();
      return notRolled("no two consecutive layer segments (or groups of up to " +
                       Twine(kMaxPeriod) + ") are equal");
    }
    if (failed(roller.localizeAfter(run, why))) {
      roller.undo();
      return notRolled(why);
    }
    FailureOr<unsigned> columns =
        roller.roll(run, module, (fn.getSymName() + "_layer_table").str(), why);
    if (failed(columns)) {
      roller.undo();
      return notRolled(why);
    }
    eraseDeadPureOps(block);
    unsigned after = countOps(fn);
    numRolled += run.segments();
    numColumns += *columns;
    numOpsBefore += before;
    numOpsAfter += after;
    std::string where;
    if (run.period > 1 || run.start > 0)
      where = " (" + std::to_string(run.count) + " groups of " + std::to_string(run.period) +
              " from segment " + std::to_string(run.start) + ")";
    remark(fn, "rolled " + Twine(run.segments()) + " layer segments" + where +
                   " into a loop over a table of " + Twine(*columns) + " columns (" +
                   Twine(before) + " ops -> " + Twine(after) + ")");
    return true;
  }
};

} // namespace

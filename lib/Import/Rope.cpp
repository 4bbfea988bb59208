//===- Rope.cpp - RoPE parameters of a Hugging Face config -------------===//
//
// Reads the rotary embedding of a config into `#kiln.rope` (docs/abi.md gives the
// meaning of its parameters), as transformers' `modeling_rope_utils` computes it:
//
//   where      transformers-5 `rope_parameters` {"rope_type", "rope_theta", "factor",
//              ...}, else the legacy top-level `rope_theta` and `rope_scaling`
//              {"rope_type" (or "type"), "factor", ...}; theta defaults to 10000.
//   default    absent or null parameters, or rope_type "default".
//   linear     factor.
//   llama3     factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
//              (default max_position_embeddings) -> low, high, original_max_position.
//   yarn       factor, original_max_position_embeddings (default
//              max_position_embeddings), beta_fast (32), beta_slow (1), truncate (true),
//              attention_factor or mscale / mscale_all_dim. The correction range is
//              `_compute_yarn_parameters`':
//                fcd(r) = dim * ln(orig_max / (r * 2 pi)) / (2 ln(theta))
//                low = fcd(beta_fast), high = fcd(beta_slow)   (floor / ceil if truncate)
//                low = max(low, 0), high = min(high, dim - 1)
//              attention_factor, unless given: get_mscale(factor, mscale) /
//              get_mscale(factor, mscale_all_dim) when both are non-zero, else
//              get_mscale(factor), with get_mscale(s, m = 1) = 0.1 m ln(s) + 1 for s > 1,
//              else 1.
//
// Any other rope type (dynamic, longrope, ...) and partial_rotary_factor != 1 are
// errors naming the field.
//
//===----------------------------------------------------------------------===//
#include "ImportDetail.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace kiln;
using namespace kiln::import_detail;
namespace json = llvm::json;

namespace {
constexpr double kDefaultTheta = 10000.0;
constexpr llvm::StringLiteral kSupportedTypes = "default, linear, llama3, yarn";

double getMscale(double scale, double mscale = 1.0) {
  if (scale <= 1.0)
    return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

/// `partial_rotary_factor` of `r`'s object, if given, must be 1 (Qwen3-Next reads its own:
/// readPartialRotary).
LogicalResult checkFullRotary(Reader &r) {
  std::optional<double> partial = r.getNumber("partial_rotary_factor", /*required=*/false);
  if (r.failedAny())
    return failure();
  // value_or: the optimizer may otherwise read the empty optional's payload first
  // (harmless, but valgrind reports a jump on an uninitialised value).
  if (partial.value_or(1.0) != 1.0) {
    r.error("partial_rotary_factor")
        << "field '" << r.fieldName("partial_rotary_factor")
        << "' = " << Reader::formatNumber(*partial)
        << " is not supported: RoPE rotates the whole head (partial_rotary_factor 1)";
    return failure();
  }
  return success();
}

/// original_max_position_embeddings of the parameters, else max_position_embeddings.
std::optional<int64_t> originalMaxPosition(Reader &p, const ModelSpec &m) {
  if (p.has("original_max_position_embeddings"))
    return p.getInt("original_max_position_embeddings");
  if (m.maxPositions > 0)
    return m.maxPositions;
  p.missing("original_max_position_embeddings");
  return std::nullopt;
}

/// beta_fast / beta_slow: absent, null or 0 take the default (Python's `or`).
std::optional<double> beta(Reader &p, StringRef key, double fallback) {
  std::optional<double> value = p.getNumber(key, /*required=*/false, /*positive=*/false);
  if (p.failedAny())
    return std::nullopt;
  if (!value || *value == 0)
    return fallback;
  if (!(*value > 0) || !std::isfinite(*value)) {
    p.error(key) << "field '" << p.fieldName(key) << "' must be a positive number, got "
                 << Reader::formatNumber(*value);
    return std::nullopt;
  }
  return value;
}
} // namespace

FailureOr<RopeAttr> kiln::import_detail::readRope(Reader &r, const ModelSpec &m) {
  Builder b(r.ctx);
  if (!m.isQwen3Next() && failed(checkFullRotary(r)))
    return failure();

  // The parameters' object: transformers-5 `rope_parameters` wins over `rope_scaling`.
  StringRef paramsKey = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json::Object *params = r.getObject(paramsKey);
  if (r.failedAny())
    return failure();

  double theta = kDefaultTheta;
  if (params && params->get("rope_theta") &&
      params->get("rope_theta")->kind() != json::Value::Null) {
    Reader p = r.nested(paramsKey, *params, "RoPE");
    std::optional<double> value = p.getNumber("rope_theta");
    if (!value)
      return failure();
    theta = *value;
  } else if (r.has("rope_theta")) {
    std::optional<double> value = r.getNumber("rope_theta");
    if (!value)
      return failure();
    theta = *value;
  }
  FloatAttr thetaAttr = b.getF64FloatAttr(theta);
  if (!params)
    return RopeAttr::get(r.ctx, RopeType::default_, thetaAttr, {}, {}, {}, 0, {});

  Reader p = r.nested(paramsKey, *params, "RoPE");
  if (!m.isQwen3Next() && failed(checkFullRotary(p)))
    return failure();
  StringRef typeKey = p.has("rope_type") || !p.has("type") ? "rope_type" : "type";
  std::optional<StringRef> typeName = p.getString(typeKey, /*required=*/false);
  if (p.failedAny())
    return failure();
  std::optional<RopeType> type = RopeType::default_;
  if (typeName)
    type = llvm::StringSwitch<std::optional<RopeType>>(*typeName)
               .Case("default", RopeType::default_)
               .Case("linear", RopeType::linear)
               .Case("llama3", RopeType::llama3)
               .Case("yarn", RopeType::yarn)
               .Default(std::nullopt);
  if (!type) {
    p.error(typeKey) << "field '" << p.fieldName(typeKey) << "' = \"" << *typeName
                     << "\" is not a supported RoPE type; supported: " << kSupportedTypes;
    return failure();
  }
  p.requiredFor = ("rope_type '" + stringifyRopeType(*type) + "'").str();
  auto attr = [&](double value) { return b.getF64FloatAttr(value); };
  auto emitAttrError = [&]() { return p.error(typeKey); };

  switch (*type) {
  case RopeType::default_:
    return RopeAttr::get(r.ctx, RopeType::default_, thetaAttr, {}, {}, {}, 0, {});
  case RopeType::linear: {
    std::optional<double> factor = p.getNumber("factor");
    if (!factor)
      return failure();
    return RopeAttr::getChecked(emitAttrError, r.ctx, RopeType::linear, thetaAttr,
                                attr(*factor), {}, {}, 0, {});
  }
  case RopeType::llama3: {
    std::optional<double> factor = p.getNumber("factor");
    std::optional<double> low = p.getNumber("low_freq_factor");
    std::optional<double> high = p.getNumber("high_freq_factor");
    std::optional<int64_t> original = originalMaxPosition(p, m);
    if (!factor || !low || !high || !original || p.failedAny())
      return failure();
    if (!(*high > *low)) {
      p.error("high_freq_factor") << "field '" << p.fieldName("high_freq_factor") << "' ("
                                  << Reader::formatNumber(*high) << ") must be greater than '"
                                  << p.fieldName("low_freq_factor") << "' ("
                                  << Reader::formatNumber(*low) << ")";
      return failure();
    }
    return RopeAttr::getChecked(emitAttrError, r.ctx, RopeType::llama3, thetaAttr,
                                attr(*factor), attr(*low), attr(*high), *original, {});
  }
  case RopeType::yarn: {
    std::optional<double> factor = p.getNumber("factor");
    std::optional<int64_t> original = originalMaxPosition(p, m);
    std::optional<double> betaFast = beta(p, "beta_fast", 32.0);
    std::optional<double> betaSlow = beta(p, "beta_slow", 1.0);
    bool truncate = p.getBool("truncate").value_or(true);
    std::optional<double> attentionFactor =
        p.getNumber("attention_factor", /*required=*/false);
    std::optional<double> mscale =
        p.getNumber("mscale", /*required=*/false, /*positive=*/false);
    std::optional<double> mscaleAllDim =
        p.getNumber("mscale_all_dim", /*required=*/false, /*positive=*/false);
    if (!factor || !original || !betaFast || !betaSlow || p.failedAny())
      return failure();
    if (theta == 1.0) {
      r.error("rope_theta") << "yarn needs rope_theta != 1 (the correction range divides by "
                             "ln(rope_theta))";
      return failure();
    }
    double dim = static_cast<double>(m.headDim);
    auto correctionDim = [&](double rotations) {
      return dim * std::log(static_cast<double>(*original) / (rotations * 2.0 * llvm::numbers::pi)) /
             (2.0 * std::log(theta));
    };
    double low = correctionDim(*betaFast), high = correctionDim(*betaSlow);
    if (truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (!attentionFactor) {
      if (mscale && mscaleAllDim && *mscale != 0 && *mscaleAllDim != 0)
        attentionFactor = getMscale(*factor, *mscale) / getMscale(*factor, *mscaleAllDim);
      else
        attentionFactor = getMscale(*factor);
    }
    return RopeAttr::getChecked(emitAttrError, r.ctx, RopeType::yarn, thetaAttr,
                                attr(*factor), attr(low), attr(high), *original,
                                attr(*attentionFactor));
  }
  }
  return failure();
}

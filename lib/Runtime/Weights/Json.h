// A small pull reader for untrusted JSON (safetensors headers, index files): the caller
// walks the document it expects and skips the rest. Bounded: nesting deeper than
// maxDepth is an error (recursion is limited to that depth), strings must be valid
// UTF-8, numbers are read as non-negative 64-bit integers or skipped. Errors are sticky
// and say where ("at byte N: ...").
#ifndef KILN_LIB_RUNTIME_WEIGHTS_JSON_H
#define KILN_LIB_RUNTIME_WEIGHTS_JSON_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::weights::json {

// True if `text` is valid UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF); otherwise sets `badOffset` to the first bad byte.
bool validUtf8(std::string_view text, size_t &badOffset);

enum class Kind { Object, Array, String, Number, Literal, End, Invalid };

class Reader {
public:
  explicit Reader(std::string_view text, unsigned maxDepth = 64) : text_(text), maxDepth_(maxDepth) {}

  // What the next value is (skips whitespace).
  Kind peek();
  // '{', then call nextKey until `more` is false; after each key read its value.
  bool beginObject();
  bool nextKey(bool &more, std::string &key);
  // '[', then call nextItem until `more` is false; after each true read the item.
  bool beginArray();
  bool nextItem(bool &more);
  bool readString(std::string &out);
  // A JSON integer in [0, 2^64): no sign, fraction or exponent.
  bool readUnsigned(uint64_t &out);
  // Any well-formed value.
  bool skipValue();
  // Only whitespace may follow the top-level value.
  bool finish();

  size_t offset() const { return pos_; }
  bool failed() const { return failed_; }
  const std::string &error() const { return error_; }
  // Records an error found by the caller at the current position.
  bool fail(const std::string &what);

private:
  void skipSpace();
  bool expect(char c, const char *what);
  bool push(bool object);
  bool skipNumber();

  std::string_view text_;
  size_t pos_ = 0;
  unsigned maxDepth_;
  // One entry per open container: bit 0 = object, bit 1 = no member read yet.
  std::vector<uint8_t> stack_;
  bool failed_ = false;
  std::string error_;
};

} // namespace kiln::weights::json

#endif // KILN_LIB_RUNTIME_WEIGHTS_JSON_H

// A bounded pull reader for untrusted JSON (see Json.h).
#include "Json.h"

#include <limits>

namespace kiln::weights::json {
namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Length of the valid UTF-8 sequence starting at p[0] (at most `avail` bytes), or 0.
size_t utf8Length(const unsigned char *p, size_t avail) {
  unsigned char c = p[0];
  if (c < 0x80)
    return 1;
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < avail && p[i] >= lo && p[i] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF)
    return cont(1) ? 2 : 0;
  if (c == 0xE0)
    return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
    return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) // excludes the surrogates U+D800..U+DFFF
    return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0)
    return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3)
    return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) // up to U+10FFFF
    return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int hexValue(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

} // namespace

bool validUtf8(std::string_view text, size_t &badOffset) {
  const auto *p = reinterpret_cast<const unsigned char *>(text.data());
  size_t i = 0, n = text.size();
  while (i < n) {
    size_t len = utf8Length(p + i, n - i);
    if (len == 0) {
      badOffset = i;
      return false;
    }
    i += len;
  }
  return true;
}

bool Reader::fail(const std::string &what) {
  if (!failed_) {
    failed_ = true;
    error_ = "at byte " + std::to_string(pos_) + ": " + what;
  }
  return false;
}

void Reader::skipSpace() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
      return;
    ++pos_;
  }
}

bool Reader::expect(char c, const char *what) {
  if (pos_ < text_.size() && text_[pos_] == c) {
    ++pos_;
    return true;
  }
  return fail(what);
}

bool Reader::push(bool object) {
  if (stack_.size() >= maxDepth_)
    return fail("nesting deeper than " + std::to_string(maxDepth_) + " levels");
  stack_.push_back(static_cast<uint8_t>((object ? 1 : 0) | 2));
  return true;
}

Kind Reader::peek() {
  if (failed_)
    return Kind::Invalid;
  skipSpace();
  if (pos_ >= text_.size())
    return Kind::End;
  char c = text_[pos_];
  switch (c) {
  case '{':
    return Kind::Object;
  case '[':
    return Kind::Array;
  case '"':
    return Kind::String;
  case 't':
  case 'f':
  case 'n':
    return Kind::Literal;
  default:
    return c == '-' || isDigit(c) ? Kind::Number : Kind::Invalid;
  }
}

bool Reader::beginObject() {
  if (failed_)
    return false;
  skipSpace();
  return expect('{', "expected an object") && push(true);
}

bool Reader::beginArray() {
  if (failed_)
    return false;
  skipSpace();
  return expect('[', "expected an array") && push(false);
}

bool Reader::nextKey(bool &more, std::string &key) {
  more = false;
  if (failed_)
    return false;
  if (stack_.empty() || !(stack_.back() & 1))
    return fail("internal error: nextKey outside an object");
  skipSpace();
  bool first = stack_.back() & 2;
  if (pos_ < text_.size() && text_[pos_] == '}') {
    ++pos_;
    stack_.pop_back();
    return true;
  }
  if (first) {
    stack_.back() &= static_cast<uint8_t>(~2u);
  } else {
    if (!expect(',', "expected ',' or '}' after an object member"))
      return false;
    skipSpace();
  }
  if (pos_ >= text_.size() || text_[pos_] != '"')
    return fail(first ? "expected a string key or '}'" : "expected a string key after ','");
  if (!readString(key))
    return false;
  skipSpace();
  if (!expect(':', "expected ':' after an object key"))
    return false;
  more = true;
  return true;
}

bool Reader::nextItem(bool &more) {
  more = false;
  if (failed_)
    return false;
  if (stack_.empty() || (stack_.back() & 1))
    return fail("internal error: nextItem outside an array");
  skipSpace();
  bool first = stack_.back() & 2;
  if (pos_ < text_.size() && text_[pos_] == ']') {
    ++pos_;
    stack_.pop_back();
    return true;
  }
  if (first) {
    stack_.back() &= static_cast<uint8_t>(~2u);
  } else {
    if (!expect(',', "expected ',' or ']' after an array item"))
      return false;
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']')
      return fail("expected a value after ','");
  }
  more = true;
  return true;
}

bool Reader::readString(std::string &out) {
  if (failed_)
    return false;
  skipSpace();
  if (pos_ >= text_.size() || text_[pos_] != '"')
    return fail("expected a string");
  ++pos_;
  out.clear();
  const size_t n = text_.size();
  const auto *bytes = reinterpret_cast<const unsigned char *>(text_.data());
  for (;;) {
    size_t run = pos_;
    while (pos_ < n && bytes[pos_] != '"' && bytes[pos_] != '\\' && bytes[pos_] >= 0x20 &&
           bytes[pos_] < 0x80)
      ++pos_;
    out.append(text_.data() + run, pos_ - run);
    if (pos_ >= n)
      return fail("unterminated string");
    unsigned char c = bytes[pos_];
    if (c == '"') {
      ++pos_;
      return true;
    }
    if (c < 0x20)
      return fail("control character in a string (it must be escaped)");
    if (c >= 0x80) {
      size_t len = utf8Length(bytes + pos_, n - pos_);
      if (len == 0)
        return fail("invalid UTF-8 in a string");
      out.append(text_.data() + pos_, len);
      pos_ += len;
      continue;
    }
    // A backslash escape.
    if (pos_ + 1 >= n)
      return fail("unterminated string");
    char e = text_[pos_ + 1];
    switch (e) {
    case '"':
    case '\\':
    case '/':
      out += e;
      pos_ += 2;
      continue;
    case 'b':
      out += '\b';
      pos_ += 2;
      continue;
    case 'f':
      out += '\f';
      pos_ += 2;
      continue;
    case 'n':
      out += '\n';
      pos_ += 2;
      continue;
    case 'r':
      out += '\r';
      pos_ += 2;
      continue;
    case 't':
      out += '\t';
      pos_ += 2;
      continue;
    case 'u':
      break;
    default:
      return fail("invalid escape in a string");
    }
    auto hex4 = [&](size_t at, uint32_t &v) {
      if (at + 4 > n)
        return false;
      v = 0;
      for (size_t i = 0; i < 4; ++i) {
        int h = hexValue(text_[at + i]);
        if (h < 0)
          return false;
        v = v * 16 + static_cast<uint32_t>(h);
      }
      return true;
    };
    uint32_t cp;
    if (!hex4(pos_ + 2, cp))
      return fail("invalid \\u escape (four hex digits expected)");
    if (cp >= 0xDC00 && cp <= 0xDFFF)
      return fail("invalid \\u escape: a low surrogate without a high one");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      uint32_t lo;
      if (pos_ + 8 > n || text_[pos_ + 6] != '\\' || text_[pos_ + 7] != 'u' || !hex4(pos_ + 8, lo) ||
          lo < 0xDC00 || lo > 0xDFFF)
        return fail("invalid \\u escape: a high surrogate without a low one");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      pos_ += 6;
    }
    pos_ += 6;
    appendUtf8(out, cp);
  }
}

bool Reader::readUnsigned(uint64_t &out) {
  if (failed_)
    return false;
  skipSpace();
  const size_t n = text_.size();
  if (pos_ < n && text_[pos_] == '-')
    return fail("expected a non-negative integer, found a negative number");
  if (pos_ >= n || !isDigit(text_[pos_]))
    return fail("expected a non-negative integer");
  uint64_t value = 0;
  if (text_[pos_] == '0') {
    ++pos_;
    if (pos_ < n && isDigit(text_[pos_]))
      return fail("number with a leading zero");
  } else {
    while (pos_ < n && isDigit(text_[pos_])) {
      uint64_t d = static_cast<uint64_t>(text_[pos_] - '0');
      if (value > (std::numeric_limits<uint64_t>::max() - d) / 10)
        return fail("integer does not fit in 64 bits");
      value = value * 10 + d;
      ++pos_;
    }
  }
  if (pos_ < n && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
    return fail("expected an integer, found a fraction or exponent");
  out = value;
  return true;
}

bool Reader::skipNumber() {
  const size_t n = text_.size();
  if (pos_ < n && text_[pos_] == '-')
    ++pos_;
  if (pos_ < n && text_[pos_] == '0') {
    ++pos_;
    if (pos_ < n && isDigit(text_[pos_]))
      return fail("number with a leading zero");
  } else if (pos_ < n && isDigit(text_[pos_])) {
    while (pos_ < n && isDigit(text_[pos_]))
      ++pos_;
  } else {
    return fail("invalid number");
  }
  if (pos_ < n && text_[pos_] == '.') {
    ++pos_;
    if (pos_ >= n || !isDigit(text_[pos_]))
      return fail("invalid number: digits expected after '.'");
    while (pos_ < n && isDigit(text_[pos_]))
      ++pos_;
  }
  if (pos_ < n && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < n && (text_[pos_] == '+' || text_[pos_] == '-'))
      ++pos_;
    if (pos_ >= n || !isDigit(text_[pos_]))
      return fail("invalid number: digits expected in the exponent");
    while (pos_ < n && isDigit(text_[pos_]))
      ++pos_;
  }
  return true;
}

bool Reader::skipValue() {
  switch (peek()) {
  case Kind::Object: {
    if (!beginObject())
      return false;
    std::string key;
    for (;;) {
      bool more;
      if (!nextKey(more, key))
        return false;
      if (!more)
        return true;
      if (!skipValue())
        return false;
    }
  }
  case Kind::Array: {
    if (!beginArray())
      return false;
    for (;;) {
      bool more;
      if (!nextItem(more))
        return false;
      if (!more)
        return true;
      if (!skipValue())
        return false;
    }
  }
  case Kind::String: {
    std::string s;
    return readString(s);
  }
  case Kind::Number:
    return skipNumber();
  case Kind::Literal:
    for (std::string_view lit : {std::string_view("true"), std::string_view("false"), std::string_view("null")}) {
      if (text_.size() - pos_ >= lit.size() && text_.substr(pos_, lit.size()) == lit) {
        pos_ += lit.size();
        return true;
      }
    }
    return fail("invalid literal (expected true, false or null)");
  case Kind::End:
    return fail("unexpected end of input (a value was expected)");
  case Kind::Invalid:
    break;
  }
  return fail("expected a value");
}

bool Reader::finish() {
  if (failed_)
    return false;
  if (!stack_.empty())
    return fail("internal error: unclosed object or array");
  skipSpace();
  if (pos_ != text_.size())
    return fail("unexpected text after the top-level value");
  return true;
}

} // namespace kiln::weights::json

// The safetensors reader and the manifest parser on good and hostile input. Each test
// writes its files into a fresh temporary directory and removes it afterwards.
#include "kiln/Runtime/Manifest.h"
#include "kiln/Runtime/Safetensors.h"
#include "kiln/Runtime/WeightTransforms.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>
#include <vector>

using kiln::weights::Dtype;
using kiln::weights::SafetensorsIndex;
using kiln::weights::TensorInfo;

namespace {

class TempDir {
public:
  TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/kiln-weights-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()))
      path_ = buf.data();
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

bool writeFile(const std::string &path, const std::string &bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return false;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      ::close(fd);
      return false;
    }
    done += static_cast<size_t>(w);
  }
  return ::close(fd) == 0;
}

std::string lengthPrefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A safetensors file: length, header, data.
std::string safetensors(const std::string &header, const std::string &data) {
  return lengthPrefix(header.size()) + header + data;
}

std::string pattern(size_t n, unsigned seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<char>((i * 131 + seed * 7 + 3) & 0xff);
  return out;
}

// Tensor "a": BF16 [2, 3] (12 bytes), "b": F32 [4] (16 bytes), in that order.
const char *kTwoTensors = R"({"__metadata__":{"format":"pt"},)"
                          R"("a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                          R"("b":{"dtype":"F32","shape":[4],"data_offsets":[12,28]}})";

// Opens a single file holding `header` and `data`; returns the error ("" if it opened).
std::string openError(const std::string &header, const std::string &data) {
  TempDir dir;
  std::string file = dir / "model.safetensors";
  if (!writeFile(file, safetensors(header, data)))
    return "test setup: cannot write " + file;
  SafetensorsIndex index;
  std::string error;
  if (index.open(file, error)) {
    EXPECT_TRUE(error.empty());
    return "";
  }
  EXPECT_NE(error.find(file), std::string::npos) << "the error should name the file: " << error;
  EXPECT_TRUE(index.tensors().empty());
  return error;
}

void expectError(const std::string &error, const std::string &part) {
  EXPECT_NE(error.find(part), std::string::npos) << "error: '" << error << "' lacks '" << part << "'";
}

TEST(Safetensors, DtypeNames) {
  EXPECT_STREQ(kiln::weights::dtypeName(Dtype::bf16), "bf16");
  EXPECT_STREQ(kiln::weights::dtypeName(Dtype::boolean), "bool");
  EXPECT_STREQ(kiln::weights::dtypeName(Dtype::f8_e4m3), "f8_e4m3");
  EXPECT_STREQ(kiln::weights::dtypeName(Dtype::unknown), "unknown");
  EXPECT_EQ(kiln::weights::dtypeBytes(Dtype::bf16), 2u);
  EXPECT_EQ(kiln::weights::dtypeBytes(Dtype::f64), 8u);
  EXPECT_EQ(kiln::weights::dtypeBytes(Dtype::f8_e5m2), 1u);
  EXPECT_EQ(kiln::weights::dtypeBytes(Dtype::unknown), 0u);
}

TEST(Safetensors, SingleFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string header = kTwoTensors;
  std::string data = pattern(28, 1);
  ASSERT_TRUE(writeFile(dir / "model.safetensors", safetensors(header, data)));

  for (const std::string &path : {dir.path(), dir / "model.safetensors"}) {
    SafetensorsIndex index;
    std::string error;
    ASSERT_TRUE(index.open(path, error)) << error;
    ASSERT_EQ(index.tensors().size(), 2u);
    const TensorInfo *a = index.find("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->name, "a");
    EXPECT_EQ(a->file, dir / "model.safetensors");
    EXPECT_EQ(a->dtype, Dtype::bf16);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->dataOffset, 8 + header.size());
    EXPECT_EQ(a->bytes, 12u);
    const TensorInfo *b = index.find("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->dtype, Dtype::f32);
    EXPECT_EQ(b->shape, (std::vector<int64_t>{4}));
    EXPECT_EQ(b->dataOffset, 8 + header.size() + 12);
    EXPECT_EQ(b->bytes, 16u);
    EXPECT_EQ(index.tensors()[0].name, "a");
    EXPECT_EQ(index.tensors()[1].name, "b");

    std::string got(16, '\0');
    ASSERT_TRUE(index.read(*b, got.data(), error)) << error;
    EXPECT_EQ(got, data.substr(12, 16));
  }
}

TEST(Safetensors, MissingTensor) {
  TempDir dir;
  ASSERT_TRUE(writeFile(dir / "model.safetensors", safetensors(kTwoTensors, pattern(28, 1))));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(dir.path(), error)) << error;
  EXPECT_EQ(index.find("c"), nullptr);
  EXPECT_EQ(index.find(""), nullptr);
  // A TensorInfo the index does not know is refused by read().
  TensorInfo stranger = *index.find("a");
  stranger.name = "c";
  char buf[12];
  EXPECT_FALSE(index.read(stranger, buf, error));
  expectError(error, "'c'");
  // So is a copy whose offsets were changed.
  TensorInfo moved = *index.find("a");
  moved.dataOffset = 0;
  EXPECT_FALSE(index.read(moved, buf, error));
  expectError(error, "'a'");
}

TEST(Safetensors, Bf16RoundTrip) {
  TempDir dir;
  // bf16 values 1.0, -2.0, 0.5, NaN, and 252 patterned ones: 256 elements.
  std::string data;
  for (uint16_t bits : {uint16_t(0x3f80), uint16_t(0xc000), uint16_t(0x3f00), uint16_t(0x7fc1)}) {
    data += static_cast<char>(bits & 0xff);
    data += static_cast<char>(bits >> 8);
  }
  data += pattern(504, 9);
  std::string header = R"({"w":{"dtype":"BF16","shape":[16,16],"data_offsets":[0,512]}})";
  header.append(8 - (8 + header.size()) % 8, ' ');  // padded, as writers align the data
  ASSERT_TRUE(writeFile(dir / "model.safetensors", safetensors(header, data)));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(dir.path(), error)) << error;
  const TensorInfo *w = index.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dataOffset % 8, 0u);
  std::vector<uint16_t> values(256);
  ASSERT_TRUE(index.read(*w, values.data(), error)) << error;
  EXPECT_EQ(std::memcmp(values.data(), data.data(), 512), 0);
  EXPECT_EQ(values[0], 0x3f80);
  EXPECT_EQ(values[1], 0xc000);
  EXPECT_EQ(values[3], 0x7fc1);
}

TEST(Safetensors, EmptyAndScalarTensors) {
  TempDir dir;
  std::string header = R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                       R"("z":{"dtype":"I32","shape":[0,7],"data_offsets":[8,8]},)"
                       R"("f":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[8,11]}})";
  ASSERT_TRUE(writeFile(dir / "model.safetensors", safetensors(header, pattern(11, 2))));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(dir.path(), error)) << error;
  ASSERT_NE(index.find("s"), nullptr);
  EXPECT_TRUE(index.find("s")->shape.empty());
  EXPECT_EQ(index.find("z")->bytes, 0u);
  EXPECT_TRUE(index.read(*index.find("z"), nullptr, error)) << error;
  EXPECT_EQ(index.find("f")->dtype, Dtype::f8_e4m3);
}

TEST(Safetensors, Sharded) {
  TempDir dir;
  std::string h1 = R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                   R"("c":{"dtype":"I8","shape":[3],"data_offsets":[4,7]},)"
                   R"("extra":{"dtype":"U8","shape":[1],"data_offsets":[7,8]}})";
  std::string h2 = R"({"b":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]}})";
  std::string d1 = pattern(8, 3), d2 = pattern(4, 4);
  ASSERT_TRUE(writeFile(dir / "model-00001-of-00002.safetensors", safetensors(h1, d1)));
  ASSERT_TRUE(writeFile(dir / "model-00002-of-00002.safetensors", safetensors(h2, d2)));
  ASSERT_TRUE(writeFile(dir / "model.safetensors.index.json",
                        R"({"metadata": {"total_size": 11, "nested": {"x": [1, 2.5e3, null, true]}},
                            "weight_map": {"a": "model-00001-of-00002.safetensors",
                                           "b": "model-00002-of-00002.safetensors",
                                           "c": "model-00001-of-00002.safetensors"}})"));
  for (const std::string &path : {dir.path(), dir / "model.safetensors.index.json"}) {
    SafetensorsIndex index;
    std::string error;
    ASSERT_TRUE(index.open(path, error)) << error;
    ASSERT_EQ(index.tensors().size(), 3u);  // "extra" is not in the weight_map
    EXPECT_EQ(index.tensors()[0].name, "a");
    EXPECT_EQ(index.tensors()[1].name, "b");
    EXPECT_EQ(index.tensors()[2].name, "c");
    EXPECT_EQ(index.find("extra"), nullptr);
    const TensorInfo *a = index.find("a"), *b = index.find("b"), *c = index.find("c");
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(a->file, dir / "model-00001-of-00002.safetensors");
    EXPECT_EQ(b->file, dir / "model-00002-of-00002.safetensors");
    EXPECT_EQ(b->dtype, Dtype::f16);
    EXPECT_EQ(b->shape, (std::vector<int64_t>{1, 2}));
    std::string got(4, '\0');
    ASSERT_TRUE(index.read(*b, got.data(), error)) << error;
    EXPECT_EQ(got, d2);
    got.assign(3, '\0');
    ASSERT_TRUE(index.read(*c, got.data(), error)) << error;
    EXPECT_EQ(got, d1.substr(4, 3));
  }

  // Moving an index keeps its files open; re-opening replaces its contents.
  SafetensorsIndex first;
  std::string error;
  ASSERT_TRUE(first.open(dir.path(), error)) << error;
  SafetensorsIndex second(std::move(first));
  std::string got(4, '\0');
  ASSERT_TRUE(second.read(*second.find("b"), got.data(), error)) << error;
  EXPECT_FALSE(second.open(dir / "nonexistent", error));
  EXPECT_TRUE(second.tensors().empty());
}

TEST(Safetensors, ShardedErrors) {
  std::string h1 = R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  auto openWith = [&](const std::string &indexJson) {
    TempDir dir;
    EXPECT_TRUE(writeFile(dir / "s1.safetensors", safetensors(h1, pattern(4, 5))));
    EXPECT_TRUE(writeFile(dir / "model.safetensors.index.json", indexJson));
    SafetensorsIndex index;
    std::string error;
    EXPECT_FALSE(index.open(dir.path(), error));
    expectError(error, dir / "model.safetensors.index.json");
    EXPECT_TRUE(index.tensors().empty());
    return error;
  };
  // A shard that does not exist.
  std::string e = openWith(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  expectError(e, "'s2.safetensors'");
  expectError(e, "'b'");
  expectError(e, "No such file");
  // A tensor its shard does not hold.
  e = openWith(R"({"weight_map":{"a":"s1.safetensors","zz":"s1.safetensors"}})");
  expectError(e, "'zz'");
  expectError(e, "'s1.safetensors'");
  expectError(e, "does not hold it");
  // Shard names that leave the directory.
  e = openWith(R"({"weight_map":{"a":"../s1.safetensors"}})");
  expectError(e, "'../s1.safetensors'");
  expectError(e, "not a plain file name");
  e = openWith(R"({"weight_map":{"a":"/etc/passwd"}})");
  expectError(e, "not a plain file name");
  e = openWith(R"({"weight_map":{"a":".."}})");
  expectError(e, "not a plain file name");
  e = openWith(R"({"weight_map":{"a":"s1.safetensors\u0000x"}})");
  expectError(e, "not a plain file name");
  // Malformed or incomplete indexes.
  e = openWith(R"({"metadata":{}})");
  expectError(e, "no \"weight_map\"");
  e = openWith(R"({"weight_map":{"a":"s1.safetensors","a":"s1.safetensors"}})");
  expectError(e, "twice");
  e = openWith(R"({"weight_map":{"a":3}})");
  expectError(e, "expected a string");
  e = openWith(R"({"weight_map":{"a":"s1.safetensors"})");
  expectError(e, "at byte");
  e = openWith("[]");
  expectError(e, "JSON object");
  e = openWith(R"({"metadata":)" + std::string(10000, '[') + R"(, "weight_map":{}})");
  expectError(e, "nesting deeper than 64 levels");
  // A shard whose header is bad: the error names the shard and the index.
  {
    TempDir dir;
    ASSERT_TRUE(writeFile(dir / "s1.safetensors", safetensors(R"({"a":{"dtype":"X"}})", "")));
    ASSERT_TRUE(writeFile(dir / "model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors"}})"));
    SafetensorsIndex index;
    std::string error;
    EXPECT_FALSE(index.open(dir.path(), error));
    expectError(error, dir / "s1.safetensors");
    expectError(error, "missing \"shape\"");
  }
}

TEST(Safetensors, NoCheckpoint) {
  TempDir dir;
  SafetensorsIndex index;
  std::string error;
  EXPECT_FALSE(index.open(dir.path(), error));
  expectError(error, "neither model.safetensors nor model.safetensors.index.json");
  EXPECT_FALSE(index.open(dir / "missing.safetensors", error));
  expectError(error, "missing.safetensors");
  // A FIFO must not hang the open.
  ASSERT_EQ(::mkfifo((dir / "fifo.safetensors").c_str(), 0600), 0);
  EXPECT_FALSE(index.open(dir / "fifo.safetensors", error));
  expectError(error, "not a regular file");
  // A directory named model.safetensors.
  ASSERT_EQ(::mkdir((dir / "model.safetensors").c_str(), 0700), 0);
  EXPECT_FALSE(index.open(dir.path(), error));
  expectError(error, "not a regular file");
}

TEST(Safetensors, TruncatedFiles) {
  // Data shorter than the header's offsets.
  std::string e = openError(kTwoTensors, pattern(20, 1));
  expectError(e, "tensor 'b'");
  expectError(e, "run past the data buffer (20 bytes)");
  // Shorter than the 8-byte length.
  TempDir dir;
  ASSERT_TRUE(writeFile(dir / "tiny.safetensors", "\x05\x00\x00"));
  SafetensorsIndex index;
  std::string error;
  EXPECT_FALSE(index.open(dir / "tiny.safetensors", error));
  expectError(error, "too small");
  ASSERT_TRUE(writeFile(dir / "empty.safetensors", ""));
  EXPECT_FALSE(index.open(dir / "empty.safetensors", error));
  expectError(error, "too small");
}

TEST(Safetensors, HeaderLengthLargerThanFile) {
  TempDir dir;
  std::string header = kTwoTensors;
  std::string bytes = lengthPrefix(header.size() + 100) + header;
  ASSERT_TRUE(writeFile(dir / "model.safetensors", bytes));
  SafetensorsIndex index;
  std::string error;
  EXPECT_FALSE(index.open(dir.path(), error));
  expectError(error, "header length");
  expectError(error, "larger than the rest of the file");
  // An absurd length (2^64 - 1) on a small file, and a huge one on a sparse file.
  ASSERT_TRUE(writeFile(dir / "model.safetensors", lengthPrefix(~uint64_t(0)) + header));
  EXPECT_FALSE(index.open(dir.path(), error));
  expectError(error, "larger than the rest of the file");
  int fd = ::open((dir / "model.safetensors").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  std::string prefix = lengthPrefix(200u * 1000 * 1000);
  ASSERT_EQ(::write(fd, prefix.data(), 8), 8);
  bool sparse = ::ftruncate(fd, 300 * 1000 * 1000) == 0;
  ::close(fd);
  if (sparse) {
    EXPECT_FALSE(index.open(dir.path(), error));
    expectError(error, "exceeds the limit of 100000000 bytes");
  }
}

TEST(Safetensors, MalformedJson) {
  const char *cases[][2] = {
      {"", "JSON object"},
      {"[]", "JSON object"},
      {"{", "expected a string key or '}'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", "expected ',' or '}'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},})", "expected a string key after ','"},
      {R"({"a":{"dtype":"F32","shape":[1,],"data_offsets":[0,4]}})", "expected a value after ','"},
      {R"({"a":{"dtype":"F32" "shape":[1],"data_offsets":[0,4]}})", "expected ',' or '}'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x)", "unexpected text after"},
      {R"({"a":{"dtype":"F\x32","shape":[1],"data_offsets":[0,4]}})", "invalid escape"},
      {R"({"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})", "leading zero"},
      {R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "fraction or exponent"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":tru}})", "invalid literal"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1e}})", "exponent"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":"\ud800"}})", "high surrogate"},
      {"{\"a\xff\":{}}", "invalid UTF-8"},
      {"{\"a\n\":{}}", "control character"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}})", "does not fit in 64 bits"},
      {R"({"a":"F32"})", "expected an object"},
      {R"({"__metadata__":{"k":1}})", "expected a string"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       "appears twice"},
      {R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "\"dtype\" appears twice"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", "missing \"data_offsets\""},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "exactly two"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}})", "exactly two"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "negative"},
      {R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]}})", "too large"},
      {R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "expected a string"},
      {R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "empty name"},
  };
  for (auto &c : cases) {
    SCOPED_TRACE(c[0]);
    std::string e = openError(c[0], pattern(4, 0));
    EXPECT_FALSE(e.empty());
    expectError(e, c[1]);
  }
  // Unicode escapes and raw UTF-8 in names are fine; unknown fields are skipped.
  TempDir dir;
  ASSERT_TRUE(writeFile(dir / "model.safetensors",
                        safetensors(R"({"\u00e9\ud83d\ude00\u00e9\/":{"dtype":"F32","shape":[1],"data_offsets":[0,4],)"
                                    R"("extra":{"k":[1,-2.5E+3,"s",false,null]}}})",
                                    pattern(4, 0))));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(dir.path(), error)) << error;
  EXPECT_NE(index.find("\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9/"), nullptr);
}

TEST(Safetensors, DeepNesting) {
  std::string e = openError(std::string(10000, '['), "");
  expectError(e, "JSON object");
  e = openError(std::string(10000, '{'), "");
  expectError(e, "header");
  e = openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":)" + std::string(10000, '[') +
                    std::string(10000, ']') + "}}",
                pattern(4, 0));
  expectError(e, "nesting deeper than 64 levels");
  e = openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":)" + std::string(100000, '{'),
                pattern(4, 0));
  expectError(e, "header");
  // 60 levels are fine.
  EXPECT_EQ(openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":)" + std::string(60, '[') +
                          std::string(60, ']') + "}}",
                      pattern(4, 0)),
            "");
}

TEST(Safetensors, BadOffsets) {
  std::string e = openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", pattern(4, 0));
  expectError(e, "run past the data buffer (4 bytes)");
  e = openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", pattern(8, 0));
  expectError(e, "end before they begin");
  e = openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})",
                pattern(8, 0));
  expectError(e, "run past the data buffer");
  // Overlapping tensors are allowed (the data is only read).
  EXPECT_EQ(openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                      pattern(4, 0)),
            "");
}

TEST(Safetensors, ShapeBytesMismatch) {
  std::string e = openError(R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}})", pattern(12, 0));
  expectError(e, "tensor 'a'");
  expectError(e, "hold 10 bytes, but the shape and dtype BF16 need 12");
  e = openError(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", pattern(4, 0));
  expectError(e, "overflows 64 bits");
  e = openError(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}})", pattern(4, 0));
  expectError(e, "overflows 64 bits");
  e = openError(R"({"a":{"dtype":"F32","shape":[1,,1],"data_offsets":[0,4]}})", pattern(4, 0));
  expectError(e, "expected a non-negative integer");
  std::string manyDims = "[";
  for (int i = 0; i < 65; ++i)
    manyDims += i ? ",1" : "1";
  e = openError(R"({"a":{"dtype":"F32","shape":)" + manyDims + R"(],"data_offsets":[0,4]}})", pattern(4, 0));
  expectError(e, "more than 64 dimensions");
}

TEST(Safetensors, UnknownDtype) {
  std::string e = openError(R"({"a":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})", pattern(2, 0));
  expectError(e, "tensor 'a'");
  expectError(e, "unsupported dtype 'U16'");
  e = openError(R"({"a":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})", pattern(2, 0));
  expectError(e, "unsupported dtype 'bf16'");
}

TEST(Safetensors, ReadAfterTruncation) {
  TempDir dir;
  std::string header = kTwoTensors;
  std::string file = dir / "model.safetensors";
  ASSERT_TRUE(writeFile(file, safetensors(header, pattern(28, 1))));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(dir.path(), error)) << error;
  ASSERT_EQ(::truncate(file.c_str(), static_cast<off_t>(8 + header.size() + 20)), 0);
  char buf[16];
  EXPECT_TRUE(index.read(*index.find("a"), buf, error)) << error;
  EXPECT_FALSE(index.read(*index.find("b"), buf, error));
  expectError(error, "tensor 'b'");
  expectError(error, file);
  expectError(error, "truncated");
  // Replacing the file on disk does not affect the open index; removing it neither.
  ASSERT_EQ(::unlink(file.c_str()), 0);
  EXPECT_TRUE(index.read(*index.find("a"), buf, error)) << error;
}

// U8 tensors (MXFP4's blocks and scales) read whole or a range at a time; a range outside
// the tensor is refused, naming it.
TEST(Safetensors, U8AndReadRange) {
  TempDir dir;
  std::string header = R"({"q_blocks":{"dtype":"U8","shape":[2,3,16],"data_offsets":[0,96]},)"
                       R"("q_scales":{"dtype":"U8","shape":[2,3],"data_offsets":[96,102]}})";
  const std::string data = pattern(102, 5);
  std::string file = dir / "model.safetensors";
  ASSERT_TRUE(writeFile(file, safetensors(header, data)));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(dir.path(), error)) << error;
  const TensorInfo *blocks = index.find("q_blocks"), *scales = index.find("q_scales");
  ASSERT_NE(blocks, nullptr);
  ASSERT_NE(scales, nullptr);
  EXPECT_EQ(blocks->dtype, Dtype::u8);
  EXPECT_STREQ(kiln::weights::dtypeName(blocks->dtype), "u8");
  EXPECT_EQ(kiln::weights::dtypeBytes(Dtype::u8), 1u);
  EXPECT_EQ(blocks->shape, (std::vector<int64_t>{2, 3, 16}));
  EXPECT_EQ(blocks->bytes, 96u);
  EXPECT_EQ(scales->bytes, 6u);
  std::string whole(96, '\0');
  ASSERT_TRUE(index.read(*blocks, whole.data(), error)) << error;
  EXPECT_EQ(whole, data.substr(0, 96));
  // Pieces of it, the last one ending at its end; an empty range needs no buffer.
  std::string piece(40, '\0');
  ASSERT_TRUE(index.readRange(*blocks, 56, 40, piece.data(), error)) << error;
  EXPECT_EQ(piece, data.substr(56, 40));
  ASSERT_TRUE(index.readRange(*scales, 2, 3, piece.data(), error)) << error;
  EXPECT_EQ(piece.substr(0, 3), data.substr(98, 3));
  EXPECT_TRUE(index.readRange(*scales, 6, 0, nullptr, error)) << error;
  // Outside it: past its end, or an offset + size that overflows.
  EXPECT_FALSE(index.readRange(*scales, 4, 3, piece.data(), error));
  expectError(error, "tensor 'q_scales'");
  expectError(error, "3 bytes at byte 4 lie outside its 6 bytes");
  EXPECT_FALSE(index.readRange(*scales, 7, 0, piece.data(), error));
  expectError(error, "lie outside its 6 bytes");
  EXPECT_FALSE(index.readRange(*scales, 2, ~uint64_t(0), piece.data(), error));
  expectError(error, "lie outside");
  // A record the index does not hold, as for read().
  TensorInfo moved = *scales;
  moved.dataOffset += 1;
  EXPECT_FALSE(index.readRange(moved, 0, 1, piece.data(), error));
  expectError(error, "does not match the index's record");
  EXPECT_FALSE(index.readRange(*scales, 0, 1, nullptr, error));
  expectError(error, "no destination buffer");
}

TEST(Safetensors, OffsetsPast4GiB) {
  // A sparse file of ~5 GiB whose one tensor sits at the end.
  TempDir dir;
  const uint64_t dataBytes = (uint64_t(5) << 30) + 16;
  std::string header = R"({"pad":{"dtype":"U8","shape":[)" + std::to_string(dataBytes - 16) +
                       R"(],"data_offsets":[0,)" + std::to_string(dataBytes - 16) +
                       R"(]},"far":{"dtype":"I64","shape":[2],"data_offsets":[)" + std::to_string(dataBytes - 16) +
                       "," + std::to_string(dataBytes) + "]}}";
  std::string file = dir / "model.safetensors";
  ASSERT_TRUE(writeFile(file, safetensors(header, "")));
  int fd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  uint64_t size = 8 + header.size() + dataBytes;
  std::string tail = pattern(16, 7);
  bool ok = ::ftruncate(fd, static_cast<off_t>(size)) == 0 &&
            ::pwrite(fd, tail.data(), 16, static_cast<off_t>(size - 16)) == 16;
  ::close(fd);
  if (!ok)
    GTEST_SKIP() << "no room for a sparse 5 GiB file";
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(dir.path(), error)) << error;
  const TensorInfo *far = index.find("far");
  ASSERT_NE(far, nullptr);
  EXPECT_EQ(far->dataOffset, size - 16);
  EXPECT_GT(far->dataOffset, uint64_t(1) << 32);
  std::string got(16, '\0');
  ASSERT_TRUE(index.read(*far, got.data(), error)) << error;
  EXPECT_EQ(got, tail);
}

// ---- Manifest -------------------------------------------------------------------------

using kiln::runtime::Manifest;
using kiln::runtime::parseManifest;

std::vector<std::string> validLines() {
  return {
      "kiln-model 2",
      "name llama-tiny",
      "vocab_size 1024",
      "hidden_size 256",
      "num_layers 2",
      "max_batch 16",
      "max_seq_len 512",
      "page_size 64",
      "kv_pages 128",
      "max_step_tokens 2048",
      "max_logit_rows 64",
      "max_draft_len 3",
      "weight_bytes 655872",
      "cache_bytes 2097152",
      "speculative_bytes 4096",
      "activation_bytes 8388608",
      "workspace_bytes 33554432",
      "io_bytes 65536",
      "cuda_graphs 64",
      "cuda_graph_bytes 134217728",
      "cuda_graph_batches 1,2,4,8,16",
      "weight model.embed_tokens.weight bf16 1024x256 0 524288",       // line 22
      "weight model.layers.0.self_attn.q_proj.weight bf16 256x256 524288 131072",
      "weight model.norm.weight f32 128 655360 512",                   // line 24
      "weight empty.weight i32 0x4 655360 0",
      "end",                                                           // line 26
  };
}

std::string join(const std::vector<std::string> &lines) {
  std::string out;
  for (const std::string &l : lines)
    out += l + "\n";
  return out;
}

// Parses `lines` with line `line` (1-based) replaced by `text` (or erased if `text` is
// null); expects an error naming `errorLine` and containing `part`.
void expectManifestError(const std::vector<std::string> &lines, size_t errorLine, const std::string &part) {
  Manifest m;
  m.name = "untouched";
  std::string error;
  EXPECT_FALSE(parseManifest(join(lines), m, error));
  expectError(error, "line " + std::to_string(errorLine) + ": ");
  expectError(error, part);
  EXPECT_EQ(m.name, "untouched");
}

std::vector<std::string> with(size_t line, const char *text) {
  std::vector<std::string> lines = validLines();
  if (text)
    lines[line - 1] = text;
  else
    lines.erase(lines.begin() + static_cast<long>(line - 1));
  return lines;
}

TEST(Manifest, Valid) {
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(join(validLines()), m, error)) << error;
  EXPECT_EQ(m.name, "llama-tiny");
  EXPECT_EQ(m.vocabSize, 1024);
  EXPECT_EQ(m.hiddenSize, 256);
  EXPECT_EQ(m.numLayers, 2);
  EXPECT_EQ(m.maxBatch, 16);
  EXPECT_EQ(m.maxSeqLen, 512);
  EXPECT_EQ(m.pageSize, 64);
  EXPECT_EQ(m.kvPages, 128);
  EXPECT_EQ(m.maxStepTokens, 2048);
  EXPECT_EQ(m.maxLogitRows, 64);
  EXPECT_EQ(m.maxDraftLen, 3);
  EXPECT_EQ(m.weightBytes, 655872u);
  EXPECT_EQ(m.cacheBytes, 2097152u);
  EXPECT_EQ(m.speculativeBytes, 4096u);
  EXPECT_EQ(m.activationBytes, 8388608u);
  EXPECT_EQ(m.workspaceBytes, 33554432u);
  EXPECT_EQ(m.ioBytes, 65536u);
  EXPECT_EQ(m.cudaGraphs, 64);
  EXPECT_EQ(m.cudaGraphBytes, 134217728u);
  EXPECT_EQ(m.cudaGraphBatches, (std::vector<int32_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(m.totalBytes(), 655872u + 2097152u + 8388608u + 33554432u + 65536u);
  ASSERT_EQ(m.weights.size(), 4u);
  EXPECT_EQ(m.weights[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(m.weights[0].dtype, "bf16");
  EXPECT_EQ(m.weights[0].shape, (std::vector<int64_t>{1024, 256}));
  EXPECT_EQ(m.weights[0].offset, 0u);
  EXPECT_EQ(m.weights[0].bytes, 524288u);
  EXPECT_EQ(m.weights[1].offset, 524288u);
  EXPECT_EQ(m.weights[2].dtype, "f32");
  EXPECT_EQ(m.weights[2].shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(m.weights[3].shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(m.weights[3].bytes, 0u);

  // Without the final newline, too.
  std::string text = join(validLines());
  text.pop_back();
  ASSERT_TRUE(parseManifest(text, m, error)) << error;

  EXPECT_EQ(m.kvRingWindow, 0); // the optional key left out

  // A model with a KV ring window says so on a line of its own.
  std::vector<std::string> ringLines = validLines();
  ringLines.insert(ringLines.begin() + 21, "kv_ring_window 4096");
  ASSERT_TRUE(parseManifest(join(ringLines), m, error)) << error;
  EXPECT_EQ(m.kvRingWindow, 4096);

  // A regrouped weight (Qwen3-Next's fused projections): q_proj's 256 rows as 4 groups of
  // 32 + 32 rows.
  ASSERT_TRUE(parseManifest(join(with(23, "weight model.layers.0.self_attn.q_proj.weight bf16 "
                                          "256x256 524288 131072 rows=4:32,32")),
                            m, error))
      << error;
  EXPECT_EQ(m.weights[1].rowGroups, (std::vector<int64_t>{4, 32, 32}));
  EXPECT_TRUE(m.weights[0].rowGroups.empty());
  EXPECT_TRUE(m.weights[1].fromShape.empty());
  EXPECT_FALSE(m.weights[1].transpose);

  // gpt-oss's fused experts (E 2, hidden 256, intermediate 64): the checkpoint's
  // [E, hidden, 2 x inter] loads transposed and regrouped as [2, E, inter, hidden]. The
  // fields come in any order.
  for (const char *fields :
       {"from=2x256x128 transpose rows=128:1,1", "rows=128:1,1 from=2x256x128 transpose",
        "transpose rows=128:1,1 from=2x256x128"}) {
    ASSERT_TRUE(parseManifest(join(with(23, (std::string("weight model.layers.0.mlp.experts."
                                                         "gate_up_proj bf16 2x2x64x256 524288 "
                                                         "131072 ") +
                                             fields)
                                                .c_str())),
                              m, error))
        << fields << ": " << error;
    EXPECT_EQ(m.weights[1].shape, (std::vector<int64_t>{2, 2, 64, 256}));
    EXPECT_EQ(m.weights[1].fromShape, (std::vector<int64_t>{2, 256, 128}));
    EXPECT_TRUE(m.weights[1].transpose);
    EXPECT_EQ(m.weights[1].rowGroups, (std::vector<int64_t>{128, 1, 1}));
  }
  // Transposed without from= (the checkpoint's [256, 256] in [in, out] order), and a
  // from= alone (a reshape).
  ASSERT_TRUE(parseManifest(join(with(23, "weight model.layers.0.self_attn.q_proj.weight bf16 "
                                          "256x256 524288 131072 transpose")),
                            m, error))
      << error;
  EXPECT_TRUE(m.weights[1].transpose);
  EXPECT_TRUE(m.weights[1].fromShape.empty());
  EXPECT_TRUE(m.weights[1].rowGroups.empty());
  ASSERT_TRUE(parseManifest(join(with(23, "weight model.layers.0.self_attn.q_proj.weight bf16 "
                                          "256x256 524288 131072 from=4x64x256")),
                            m, error))
      << error;
  EXPECT_EQ(m.weights[1].fromShape, (std::vector<int64_t>{4, 64, 256}));
  EXPECT_FALSE(m.weights[1].transpose);
  // Units smaller than a row: the 128 norm values as 2 groups of 1 + 1 units of 32 values
  // (a fused bias interleaved by blocks).
  ASSERT_TRUE(parseManifest(join(with(24, "weight model.norm.weight f32 128 655360 512 "
                                          "rows=2:1,1")),
                            m, error))
      << error;
  EXPECT_EQ(m.weights[2].rowGroups, (std::vector<int64_t>{2, 1, 1}));
  // A stacked weight without fields still parses.
  ASSERT_TRUE(parseManifest(join(with(23, "weight model.layers.0.mlp.experts.*.up_proj.weight "
                                          "bf16 2x128x256 524288 131072")),
                            m, error))
      << error;

  // MXFP4 experts (E 2, hidden 64, inter 32): gate_up dequantizes to its checkpoint shape
  // [E, 2 x inter, hidden] (from=) and regroups into [2, E, inter, hidden]; down_proj
  // [E, hidden, inter] needs no layout. The fields come in any order.
  for (const char *fields : {"mxfp4 from=2x64x64 rows=64:1,1", "from=2x64x64 rows=64:1,1 mxfp4",
                             "rows=64:1,1 mxfp4 from=2x64x64"}) {
    std::vector<std::string> lines =
        with(23, (std::string("weight model.layers.0.mlp.experts.gate_up_proj bf16 2x2x32x64 "
                              "524288 16384 ") +
                  fields)
                     .c_str());
    lines.insert(lines.begin() + 23, "weight model.layers.0.mlp.experts.down_proj bf16 2x64x32 "
                                     "540672 8192 mxfp4");
    ASSERT_TRUE(parseManifest(join(lines), m, error)) << fields << ": " << error;
    ASSERT_EQ(m.weights.size(), 5u);
    EXPECT_TRUE(m.weights[1].mxfp4);
    EXPECT_EQ(m.weights[1].fromShape, (std::vector<int64_t>{2, 64, 64}));
    EXPECT_FALSE(m.weights[1].transpose);
    EXPECT_EQ(m.weights[1].rowGroups, (std::vector<int64_t>{64, 1, 1}));
    EXPECT_TRUE(m.weights[2].mxfp4);
    EXPECT_EQ(m.weights[2].shape, (std::vector<int64_t>{2, 64, 32}));
    EXPECT_TRUE(m.weights[2].fromShape.empty());
    EXPECT_TRUE(m.weights[2].rowGroups.empty());
    EXPECT_FALSE(m.weights[0].mxfp4);
    EXPECT_FALSE(m.weights[3].mxfp4);
  }
  // With transpose too (a checkpoint whose dequantized tensor is [in, out]), and on a
  // rank-1 tensor.
  ASSERT_TRUE(parseManifest(join(with(23, "weight model.layers.0.self_attn.q_proj.weight bf16 "
                                          "256x256 524288 131072 transpose mxfp4")),
                            m, error))
      << error;
  EXPECT_TRUE(m.weights[1].mxfp4);
  EXPECT_TRUE(m.weights[1].transpose);
  ASSERT_TRUE(
      parseManifest(join(with(24, "weight model.norm.weight bf16 128 655360 256 mxfp4")), m, error))
      << error;
  EXPECT_TRUE(m.weights[2].mxfp4);

  Manifest huge;
  huge.weightBytes = ~uint64_t(0);
  huge.ioBytes = 1;
  EXPECT_EQ(huge.totalBytes(), ~uint64_t(0));
}

TEST(Manifest, Errors) {
  expectManifestError(with(1, "kiln-model 3"), 1, "unsupported manifest version '3' (this runtime reads 2)");
  expectManifestError(with(1, "hello"), 1, "kiln-model 2");
  expectManifestError(with(1, "kiln-model 1"), 1, "compiled by an older kiln-compile");
  expectManifestError(with(5, "num_layerz 2"), 5, "unknown key 'num_layerz'");
  expectManifestError(with(5, "num_layers -2"), 5, "num_layers: '-2' is negative");
  expectManifestError(with(5, "num_layers 9223372036854775808"), 5, "too large");
  expectManifestError(with(5, "num_layers 2x"), 5, "not a decimal number");
  expectManifestError(with(5, "num_layers"), 5, "1 fields found");
  expectManifestError(with(5, "num_layers  2"), 5, "empty field");
  expectManifestError(with(5, "num_layers 2 "), 5, "empty field");
  expectManifestError(with(5, "num_layers\t2"), 5, "control character");
  expectManifestError(with(5, "num_layers 2\r"), 5, "carriage return");
  expectManifestError(with(5, ""), 5, "empty line");
  expectManifestError(with(5, "hidden_size 256"), 5, "duplicate 'hidden_size' (first on line 4)");
  expectManifestError(with(5, "name other"), 5, "duplicate 'name'");
  expectManifestError(with(5, "kiln-model 2"), 5, "only be the first line");
  expectManifestError(with(5, nullptr), 25, "missing 'num_layers'");
  expectManifestError(with(2, nullptr), 25, "missing 'name'");
  expectManifestError(with(13, "weight_bytes 18446744073709551616"), 13, "does not fit in 64 bits");
  expectManifestError(with(13, "weight_bytes 1000"), 22, "outside weight_bytes 1000");
  expectManifestError(with(15, "speculative_bytes 4194304"), 15, "exceeds cache_bytes");
  expectManifestError(with(16, "activation_bytes 18446744073709551615"), 26, "overflow 64 bits");
  // Weights.
  expectManifestError(with(24, "weight model.norm.weight f8 128 655360 512"), 24, "unknown dtype 'f8'");
  expectManifestError(with(24, "weight model.norm.weight BF16 128 655360 256"), 24, "unknown dtype 'BF16'");
  expectManifestError(with(24, "weight model.norm.weight f32 128 655360 256"), 24, "is 512 bytes, not 256");
  expectManifestError(with(24, "weight model.norm.weight f32 128x 655360 512"), 24, "dimension '' is empty");
  expectManifestError(with(24, "weight model.norm.weight f32 -128 655360 512"), 24, "is negative");
  expectManifestError(with(24, "weight model.norm.weight f32 12a8 655360 512"), 24, "not a decimal number");
  expectManifestError(with(24, "weight model.norm.weight f32 128 655361 512"), 24, "not 256-byte aligned");
  expectManifestError(with(24, "weight model.norm.weight f32 128 -5 512"), 24, "is negative");
  expectManifestError(with(24, "weight model.norm.weight f32 128 655360"), 24, "(5 fields found)");
  expectManifestError(with(24, "weight model.norm.weight f32 128 18446744073709551360 512"), 24,
                      "offset + bytes overflows");
  expectManifestError(with(24, "weight model.norm.weight f32 128 1048576 512"), 24, "outside weight_bytes");
  expectManifestError(with(24, "weight model.embed_tokens.weight f32 128 655360 512"), 24,
                      "duplicate weight 'model.embed_tokens.weight' (first on line 22)");
  // Regrouped units: G x (P0 + P1 + ...) must divide the element count, every count
  // positive.
  const std::string q = "weight model.layers.0.self_attn.q_proj.weight bf16 256x256 524288 131072 ";
  auto qWith = [&](const std::string &fields) { return with(23, (q + fields).c_str()); };
  expectManifestError(qWith("rows=4:32,31"), 23,
                      "weight 'model.layers.0.self_attn.q_proj.weight': rows=4:32,31: 4 groups of "
                      "63 units must divide the 65536 elements of shape 256x256");
  expectManifestError(qWith("rows=4:64"), 23, "rows=4:64 needs at least two parts");
  expectManifestError(qWith("rows=4"), 23, "rows=4 is not of the form rows=G:P0,P1,...");
  expectManifestError(qWith("rows=0:32,32"), 23, "rows: '0' is zero");
  expectManifestError(qWith("rows=4:32,x"), 23, "rows: 'x' is not a decimal number");
  expectManifestError(qWith("rows=4:32,"), 23, "rows: '' is empty");
  expectManifestError(qWith("rows=2147483648:1,1"), 23, "rows: '2147483648' is too large");
  expectManifestError(with(25, "weight empty.weight i32 0x4 655360 0 rows=1:1,1"), 25,
                      "must divide the 0 elements of shape 0x4");
  // Unknown, repeated and misplaced fields.
  expectManifestError(qWith("cols=4:32,32"), 23,
                      "unknown field 'cols=4:32,32' (expected from=D0xD1x..., transpose, "
                      "rows=G:P0,P1,..., mxfp4 or shard=D/P[:S0,...])");
  expectManifestError(qWith("rows=4:32,32 x"), 23, "unknown field 'x'");
  expectManifestError(qWith("Transpose"), 23, "unknown field 'Transpose'");
  expectManifestError(qWith("from"), 23, "unknown field 'from'");
  expectManifestError(qWith("transpose transpose"), 23, "duplicate field 'transpose'");
  expectManifestError(qWith("rows=4:32,32 transpose rows=4:32,32"), 23, "duplicate field 'rows='");
  expectManifestError(qWith("from=256x256 from=65536"), 23, "duplicate field 'from='");
  expectManifestError(qWith("from=256x256 transpose rows=4:32,32 transpose"), 23,
                      "duplicate field 'transpose'");
  // from=: positive decimal dimensions holding SHAPE's elements.
  expectManifestError(qWith("from=256x255"), 23,
                      "from=256x255 holds 65280 elements, shape 256x256 holds 65536");
  expectManifestError(qWith("from=256x0"), 23, "from=256x0: dimension '0' is zero");
  expectManifestError(qWith("from=256x"), 23, "from=256x: dimension '' is empty");
  expectManifestError(qWith("from="), 23, "from=: dimension '' is empty");
  expectManifestError(qWith("from=2a6x256"), 23, "dimension '2a6' is not a decimal number");
  expectManifestError(qWith("from=-256x256"), 23, "dimension '-256' is negative");
  expectManifestError(qWith("from=9223372036854775808"), 23,
                      "dimension '9223372036854775808' is too large");
  expectManifestError(qWith("from=4294967296x4294967296x4"), 23,
                      "holds more than 2^64 elements, shape 256x256 holds 65536");
  // transpose: a checkpoint of rank >= 2.
  expectManifestError(with(24, "weight model.norm.weight f32 128 655360 512 transpose"), 24,
                      "weight 'model.norm.weight': transpose needs a checkpoint shape of rank >= 2 "
                      "(128 has rank 1)");
  expectManifestError(qWith("transpose from=65536"), 23,
                      "transpose needs a checkpoint shape of rank >= 2 (65536 has rank 1)");
  // A stack loads its experts' tensors as they are.
  const std::string stacked =
      "weight model.layers.0.mlp.experts.*.down_proj.weight bf16 2x128x256 524288 131072 ";
  for (const char *fields : {"transpose", "from=2x256x128", "rows=2:64,64", "mxfp4"})
    expectManifestError(with(23, (stacked + fields).c_str()), 23,
                        "weight 'model.layers.0.mlp.experts.*.down_proj.weight': a stacked "
                        "weight (a '*' in its name) takes no from=, transpose, rows= or mxfp4");
  // mxfp4: at most once, on bf16, with a checkpoint shape whose last dimension is a
  // multiple of 32 (from=, or SHAPE without it).
  expectManifestError(qWith("mxfp4 mxfp4"), 23, "duplicate field 'mxfp4'");
  expectManifestError(qWith("mxfp4 transpose mxfp4"), 23, "duplicate field 'mxfp4'");
  expectManifestError(qWith("MXFP4"), 23, "unknown field 'MXFP4'");
  expectManifestError(qWith("mxfp4=1"), 23, "unknown field 'mxfp4=1'");
  expectManifestError(with(24, "weight model.norm.weight f32 128 655360 512 mxfp4"), 24,
                      "weight 'model.norm.weight': mxfp4 needs dtype bf16 (the dequantized "
                      "tensor), not f32");
  expectManifestError(with(24, "weight model.norm.weight i32 128 655360 512 mxfp4"), 24,
                      "mxfp4 needs dtype bf16");
  expectManifestError(qWith("mxfp4 from=4096x16"), 23,
                      "weight 'model.layers.0.self_attn.q_proj.weight': mxfp4: the last dimension "
                      "of from=4096x16 is 16, not a multiple of 32 (an MXFP4 block holds 32 "
                      "values)");
  expectManifestError(with(24, "weight model.norm.weight bf16 8x16 655360 256 mxfp4"), 24,
                      "mxfp4: the last dimension of shape 8x16 is 16, not a multiple of 32");
  expectManifestError(with(24, "weight model.norm.weight bf16 96x4 655360 768 from=8x48 mxfp4"), 24,
                      "the last dimension of from=8x48 is 48, not a multiple of 32");
  // Overflowing shapes.
  expectManifestError(with(24, "weight model.norm.weight f32 4294967296x4294967296 655360 512"), 24, "overflows 64 bits");
  expectManifestError(with(24, "weight model.norm.weight f32 9223372036854775807 655360 512"), 24, "overflows 64 bits");
  expectManifestError(with(24, "weight model.norm.weight bf16 9223372036854775808 655360 512"), 24, "too large");
  // Overlapping weights (named with both lines).
  expectManifestError(with(24, "weight model.norm.weight f32 128 524544 512"), 24, "overlap (the other is on line 23)");
  expectManifestError(with(22, "weight model.embed_tokens.weight bf16 1024x256 256 524288"), 23, "overlap");
  // CUDA graphs.
  expectManifestError(with(21, "cuda_graph_batches 1,4,2"), 21, "ascending without repeats");
  expectManifestError(with(22, "cuda_graph_batches all"), 22, "duplicate 'cuda_graph_batches' (first on line 21)");
  expectManifestError(with(21, "cuda_graph_batches 1,17"), 21, "batch 17 outside [1, max_batch 16]");
  expectManifestError(with(21, "cuda_graph_batches 0"), 21, "batch 0 outside");
  expectManifestError(with(21, "cuda_graph_batches 1,,2"), 21, "'' is empty");
  expectManifestError(with(21, "cuda_graph_batches"), 21, "takes the form");
  expectManifestError(with(21, nullptr), 25, "missing 'cuda_graph_batches'");
  {
    std::vector<std::string> twice = validLines();
    twice.insert(twice.begin() + 21, "kv_ring_window 32");
    twice.insert(twice.begin() + 22, "kv_ring_window 64");
    expectManifestError(twice, 23, "duplicate 'kv_ring_window' (first on line 22)");
    std::vector<std::string> negative = validLines();
    negative.insert(negative.begin() + 21, "kv_ring_window -4");
    expectManifestError(negative, 22, "kv_ring_window is negative");
  }
  expectManifestError(with(19, "cuda_graphs 5000"), 19, "cuda_graphs 5000 > 4096");
  expectManifestError(with(20, nullptr), 25, "missing 'cuda_graph_bytes'");
  // Structure.
  expectManifestError(with(26, nullptr), 25, "no 'end' line");
  expectManifestError(with(26, "end now"), 26, "takes the form 'end'");
  {
    std::vector<std::string> lines = validLines();
    lines.push_back("vocab_size 2");
    expectManifestError(lines, 27, "text after 'end' (line 26)");
    lines.back() = "";
    expectManifestError(lines, 27, "text after 'end'");
  }
  expectManifestError({}, 1, "empty manifest");
  {
    std::vector<std::string> lines = validLines();
    lines[1] = "name llama\xff";
    expectManifestError(lines, 2, "invalid UTF-8");
  }
}

} // namespace

// A q_proj of 2 heads x [query 2 rows | gate 1 row] (rows of 2 bytes, named by their
// checkpoint index) leaves as [queries | gates]: rows 0 1 3 4, then 2 5.
TEST(WeightTransforms, RegroupUnitsIsPartMajor) {
  std::vector<unsigned char> rows;
  for (unsigned char r = 0; r < 6; ++r)
    rows.insert(rows.end(), {r, static_cast<unsigned char>(100 + r)});
  std::vector<unsigned char> scratch;
  kiln::weights::regroupUnits(rows.data(), {2, 2, 1}, 2, scratch);
  const std::vector<unsigned char> want = {0, 100, 1, 101, 3, 103, 4, 104, 2, 102, 5, 105};
  EXPECT_EQ(rows, want);
  // One group is the identity.
  std::vector<unsigned char> one = {1, 2, 3, 4, 5, 6};
  kiln::weights::regroupUnits(one.data(), {1, 1, 2}, 2, scratch);
  EXPECT_EQ(one, (std::vector<unsigned char>{1, 2, 3, 4, 5, 6}));
  // Units of one byte, three parts: [a b c] x 3 groups -> a a a b b b c c c.
  std::vector<unsigned char> abc = {'a', 'b', 'c', 'a', 'b', 'c', 'a', 'b', 'c'};
  kiln::weights::regroupUnits(abc.data(), {3, 1, 1, 1}, 1, scratch);
  EXPECT_EQ(std::string(abc.begin(), abc.end()), "aaabbbccc");
  // Unequal parts: 2 groups of [x x y] units of 3 bytes.
  std::vector<unsigned char> xy;
  for (unsigned char g = 0; g < 2; ++g)
    for (unsigned char u = 0; u < 3; ++u)
      xy.insert(xy.end(), {g, u, static_cast<unsigned char>(u < 2 ? 'x' : 'y')});
  kiln::weights::regroupUnits(xy.data(), {2, 2, 1}, 3, scratch);
  EXPECT_EQ(xy, (std::vector<unsigned char>{0, 0, 'x', 0, 1, 'x', 1, 0, 'x', 1, 1, 'x', 0, 2, 'y',
                                            1, 2, 'y'}));
}

namespace {

// `batch` row-major [rows, cols] matrices of `elementBytes`-byte elements, transposed one
// element at a time (the reference).
std::vector<unsigned char> naiveTranspose(const std::vector<unsigned char> &in, uint64_t batch,
                                          uint64_t rows, uint64_t cols, uint64_t elementBytes) {
  std::vector<unsigned char> out(in.size());
  const uint64_t matrix = rows * cols * elementBytes;
  for (uint64_t b = 0; b < batch; ++b)
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < cols; ++c)
        std::memcpy(out.data() + b * matrix + (c * rows + r) * elementBytes,
                    in.data() + b * matrix + (r * cols + c) * elementBytes, elementBytes);
  return out;
}

} // namespace

TEST(WeightTransforms, TransposeMatrices) {
  std::vector<unsigned char> scratch;
  // Two [2, 3] matrices of 2-byte elements (named by their value) become [3, 2].
  std::vector<uint16_t> m = {1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16};
  kiln::weights::transposeMatrices(reinterpret_cast<unsigned char *>(m.data()), 2, 2, 3, 2,
                                   scratch);
  EXPECT_EQ(m, (std::vector<uint16_t>{1, 4, 2, 5, 3, 6, 11, 14, 12, 15, 13, 16}));
  // f32, one [3, 1] matrix and one [1, 3]: the same bytes.
  std::vector<float> column = {1.5f, 2.5f, 3.5f};
  kiln::weights::transposeMatrices(reinterpret_cast<unsigned char *>(column.data()), 1, 3, 1, 4,
                                   scratch);
  EXPECT_EQ(column, (std::vector<float>{1.5f, 2.5f, 3.5f}));
  kiln::weights::transposeMatrices(reinterpret_cast<unsigned char *>(column.data()), 1, 1, 3, 4,
                                   scratch);
  EXPECT_EQ(column, (std::vector<float>{1.5f, 2.5f, 3.5f}));
  // Larger than a tile, not a multiple of one, in every element size (the typed copies
  // and the generic one) against the reference.
  for (uint64_t elementBytes : {1u, 2u, 3u, 4u, 8u}) {
    const uint64_t batch = 3, rows = 37, cols = 70;
    const std::string bytes = pattern(batch * rows * cols * elementBytes, 7);
    std::vector<unsigned char> data(bytes.begin(), bytes.end());
    const std::vector<unsigned char> want = naiveTranspose(data, batch, rows, cols, elementBytes);
    kiln::weights::transposeMatrices(data.data(), batch, rows, cols, elementBytes, scratch);
    EXPECT_EQ(data, want) << elementBytes << "-byte elements";
    // Transposing back restores the input.
    kiln::weights::transposeMatrices(data.data(), batch, cols, rows, elementBytes, scratch);
    EXPECT_EQ(data, naiveTranspose(want, batch, cols, rows, elementBytes));
  }
}

// The gpt-oss experts of the ABI example (E 2, hidden 4, intermediate 3), parsed from their
// manifest lines and laid out by applyLayout as the loader does after reading: gate_up
// [E, hidden, 2 x inter] (gate i in column 2i, up i in 2i + 1) becomes [2, E, inter,
// hidden] (the gate rows of every expert, then the up rows, each an output), the bias
// [E, 2 x inter] becomes [2, E, inter], down [E, inter, hidden] becomes [E, hidden, inter].
TEST(WeightTransforms, GptOssExperts) {
  constexpr int E = 2, H = 4, I = 3;
  std::vector<std::string> lines = validLines();
  lines[22] = "weight model.layers.0.mlp.experts.gate_up_proj bf16 2x2x3x4 524288 96 "
              "from=2x4x6 transpose rows=6:1,1";
  lines.insert(lines.begin() + 23, {"weight model.layers.0.mlp.experts.gate_up_proj_bias bf16 "
                                    "2x2x3 524544 24 from=2x6 rows=6:1,1",
                                    "weight model.layers.0.mlp.experts.down_proj bf16 2x4x3 "
                                    "524800 48 from=2x3x4 transpose"});
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(join(lines), m, error)) << error;
  ASSERT_EQ(m.weights.size(), 6u);
  const kiln::runtime::ManifestWeight &gateUp = m.weights[1], &bias = m.weights[2],
                                      &down = m.weights[3];

  // Each value names its checkpoint index: expert e, then the two others in order.
  std::vector<uint16_t> gateUpData, biasData, downData;
  for (int e = 0; e < E; ++e)
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < 2 * I; ++c)
        gateUpData.push_back(static_cast<uint16_t>(1000 * e + 100 * h + c));
  for (int e = 0; e < E; ++e)
    for (int c = 0; c < 2 * I; ++c)
      biasData.push_back(static_cast<uint16_t>(1000 * e + c));
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < I; ++i)
      for (int h = 0; h < H; ++h)
        downData.push_back(static_cast<uint16_t>(1000 * e + 100 * i + h));

  std::vector<unsigned char> scratch;
  auto apply = [&](std::vector<uint16_t> &data, const kiln::runtime::ManifestWeight &w) {
    ASSERT_EQ(data.size() * 2, w.bytes);
    std::string why;
    EXPECT_TRUE(
        kiln::weights::applyLayout(reinterpret_cast<unsigned char *>(data.data()), w, scratch, why))
        << why;
  };
  apply(gateUpData, gateUp);
  apply(biasData, bias);
  apply(downData, down);

  std::vector<uint16_t> wantGateUp, wantBias, wantDown;
  for (int part = 0; part < 2; ++part) // gate, then up
    for (int e = 0; e < E; ++e)
      for (int i = 0; i < I; ++i) {
        for (int h = 0; h < H; ++h) // row (part, e, i): output i's weights over the inputs
          wantGateUp.push_back(static_cast<uint16_t>(1000 * e + 100 * h + 2 * i + part));
        wantBias.push_back(static_cast<uint16_t>(1000 * e + 2 * i + part));
      }
  for (int e = 0; e < E; ++e)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < I; ++i)
        wantDown.push_back(static_cast<uint16_t>(1000 * e + 100 * i + h));
  EXPECT_EQ(gateUpData, wantGateUp);
  EXPECT_EQ(biasData, wantBias);
  EXPECT_EQ(downData, wantDown);
  // The first gate rows spelled out: expert 0's gate 0 is checkpoint column 0 over the 4
  // inputs, its gate 1 column 2; expert 0's up 0 (row 6) column 1.
  EXPECT_EQ(std::vector<uint16_t>(gateUpData.begin(), gateUpData.begin() + 8),
            (std::vector<uint16_t>{0, 100, 200, 300, 2, 102, 202, 302}));
  EXPECT_EQ(std::vector<uint16_t>(gateUpData.begin() + 24, gateUpData.begin() + 28),
            (std::vector<uint16_t>{1, 101, 201, 301}));
}

// After the widening to f32 the layout moves 4-byte elements; weights without transpose
// or rows= are left alone; an inconsistent hand-built weight is refused, its data intact.
TEST(WeightTransforms, ApplyLayoutElementSizesAndErrors) {
  kiln::runtime::ManifestWeight w;
  w.name = "x";
  w.dtype = "f32";
  w.shape = {3, 2};
  w.fromShape = {2, 3};
  w.transpose = true;
  w.bytes = 24;
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  std::vector<unsigned char> scratch;
  std::string error;
  ASSERT_TRUE(
      kiln::weights::applyLayout(reinterpret_cast<unsigned char *>(data.data()), w, scratch, error))
      << error;
  EXPECT_EQ(data, (std::vector<float>{1, 4, 2, 5, 3, 6}));

  kiln::runtime::ManifestWeight plain = w;
  plain.transpose = false;
  ASSERT_TRUE(kiln::weights::applyLayout(reinterpret_cast<unsigned char *>(data.data()), plain,
                                         scratch, error));
  EXPECT_EQ(data, (std::vector<float>{1, 4, 2, 5, 3, 6}));

  const std::vector<float> before = data;
  auto refused = [&](const kiln::runtime::ManifestWeight &bad, const std::string &part) {
    std::string why;
    EXPECT_FALSE(kiln::weights::applyLayout(reinterpret_cast<unsigned char *>(data.data()), bad,
                                            scratch, why));
    expectError(why, "weight 'x': ");
    expectError(why, part);
    EXPECT_EQ(data, before);
  };
  kiln::runtime::ManifestWeight bad = w;
  bad.fromShape = {6};
  refused(bad, "cannot transpose checkpoint shape 6");
  bad.fromShape = {2, 4};
  refused(bad, "cannot transpose checkpoint shape 2x4 into 6 elements");
  bad = w;
  bad.rowGroups = {4, 1, 1};
  refused(bad, "rows= groups do not divide the 6 elements of shape 3x2");
  bad.rowGroups = {3, 1};
  refused(bad, "rows= groups do not divide");
  bad.rowGroups = {3, 1, -1};
  refused(bad, "rows= groups do not divide");
  bad = w;
  bad.bytes = 25;
  refused(bad, "25 bytes are not whole elements of shape 3x2");
}

// ---- MXFP4 ----------------------------------------------------------------------------

namespace {

constexpr double kFp4[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

float bf16Value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// The reference: FP4 code x 2^(scale - 127) in double, then its bf16 bits through f32
// (both exact when the value is below 2^128); false when it is not a finite bf16.
bool referenceBf16(unsigned code, unsigned scale, uint16_t &bits) {
  const double value = std::ldexp(kFp4[code], static_cast<int>(scale) - 127);
  if (scale == 255 || std::fabs(value) >= std::ldexp(1.0, 128))
    return false;
  const float narrow = static_cast<float>(value);
  EXPECT_EQ(static_cast<double>(narrow), value) << "code " << code << " scale " << scale;
  uint32_t wide;
  std::memcpy(&wide, &narrow, 4);
  EXPECT_EQ(wide & 0xffff, 0u) << "code " << code << " scale " << scale << " is not a bf16";
  bits = static_cast<uint16_t>(wide >> 16);
  return true;
}

// `blocks` and `scales` dequantized by the reference into bf16 bits.
std::vector<uint16_t> referenceMxfp4(const std::string &blocks, const std::string &scales) {
  std::vector<uint16_t> out;
  for (size_t g = 0; g < scales.size(); ++g)
    for (unsigned j = 0; j < 32; ++j) {
      const unsigned byte = static_cast<unsigned char>(blocks[16 * g + j / 2]);
      uint16_t bits = 0xffff;
      EXPECT_TRUE(referenceBf16(j % 2 ? byte >> 4 : byte & 15,
                                static_cast<unsigned char>(scales[g]), bits));
      out.push_back(bits);
    }
  return out;
}

// Little-endian bf16 bytes as values.
std::vector<uint16_t> bf16Bits(const std::vector<unsigned char> &bytes) {
  std::vector<uint16_t> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint16_t>(bytes[2 * i] | bytes[2 * i + 1] << 8);
  return out;
}

// A block whose 32 elements are `codes` (each 0..15), packed two a byte, low nibble first.
std::string packBlock(const std::vector<unsigned> &codes) {
  std::string block(16, '\0');
  for (unsigned j = 0; j < 32; ++j)
    block[j / 2] = static_cast<char>(static_cast<unsigned char>(block[j / 2]) |
                                     (codes[j % codes.size()] & 15) << (j % 2 ? 4 : 0));
  return block;
}

} // namespace

// Every code under every scale against the reference, and some spelled out: the products
// are exact, down to bf16's subnormals; 2^128 and more overflow; 0xFF is NaN.
TEST(Mxfp4, EveryCodeAndScale) {
  int overflows = 0;
  for (unsigned scale = 0; scale < 256; ++scale)
    for (unsigned code = 0; code < 16; ++code) {
      uint16_t got = 0x1234, want = 0x5678;
      const bool ok = kiln::weights::mxfp4Bf16(code, scale, got);
      EXPECT_EQ(ok, referenceBf16(code, scale, want)) << "code " << code << " scale " << scale;
      if (ok)
        EXPECT_EQ(got, want) << "code " << code << " scale " << scale;
      else
        EXPECT_EQ(got, 0x1234) << "bits left alone";
      overflows += !ok && scale != 255;
    }
  EXPECT_EQ(overflows, 8 + 4); // scale 254: +-2, 3, 4, 6; scale 253: +-4, 6
  uint16_t bits = 0;
  auto value = [&](unsigned code, unsigned scale) {
    bits = 0xdead;
    EXPECT_TRUE(kiln::weights::mxfp4Bf16(code, scale, bits)) << code << " " << scale;
    return bits;
  };
  // Scale 127 is 1: the codes themselves.
  const uint16_t unit[16] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0,
                             0x8000, 0xbf00, 0xbf80, 0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0};
  for (unsigned code = 0; code < 16; ++code) {
    EXPECT_EQ(value(code, 127), unit[code]) << code;
    EXPECT_EQ(bf16Value(bits), static_cast<float>(kFp4[code]));
  }
  EXPECT_EQ(value(7, 130), 0x4240);  // 6 x 8 = 48
  EXPECT_EQ(value(9, 117), 0xba00);  // -0.5 x 2^-10
  EXPECT_EQ(value(3, 254), 0x7f40);  // 1.5 x 2^127, the largest product
  EXPECT_EQ(value(13, 253), 0xff40); // -3 x 2^126 = -1.5 x 2^127
  EXPECT_EQ(value(1, 1), 0x0040);    // 0.5 x 2^-126 = 2^-127: subnormal, 0x40 x 2^-133
  EXPECT_EQ(value(3, 0), 0x0060);    // 1.5 x 2^-127 = 0x60 x 2^-133
  EXPECT_EQ(value(1, 0), 0x0020);    // 0.5 x 2^-127 = 2^-128, the smallest product
  EXPECT_EQ(value(9, 0), 0x8020);
  EXPECT_EQ(value(4, 0), 0x0080); // 2 x 2^-127 = 2^-126: the smallest normal
  EXPECT_EQ(value(8, 0), 0x8000); // -0 stays -0 under every scale
  EXPECT_EQ(value(0, 254), 0x0000);
  EXPECT_FALSE(kiln::weights::mxfp4Bf16(4, 254, bits));  // 2^128
  EXPECT_FALSE(kiln::weights::mxfp4Bf16(14, 253, bits)); // -2^128
  EXPECT_FALSE(kiln::weights::mxfp4Bf16(1, 255, bits));  // NaN scale
  EXPECT_FALSE(kiln::weights::mxfp4Bf16(16, 127, bits)); // not a code
}

// Hand-built blocks: the nibble order, every code, tiny and large scales.
TEST(Mxfp4, DequantizeBlocks) {
  std::string blocks, scales;
  // Block 0: byte j holds codes 2j (low) and 2j + 1 (high) for j < 8, so elements 0..15
  // are the codes in order; bytes 8..15 hold 0x71 (element 0.5, then 6).
  for (unsigned j = 0; j < 8; ++j)
    blocks += static_cast<char>((2 * j + 1) << 4 | 2 * j);
  blocks += std::string(8, '\x71');
  scales += static_cast<char>(127);
  // Block 1: the codes descending, scale 2^10.
  std::vector<unsigned> down;
  for (unsigned c = 16; c-- > 0;)
    down.push_back(c);
  blocks += packBlock(down);
  scales += static_cast<char>(137);
  // Block 2: scale 2^-127 (subnormal products), block 3: 2^127 with codes that fit,
  // block 4: 2^-100.
  blocks += packBlock({1, 2, 3, 9, 10, 11, 0, 8});
  scales += static_cast<char>(0);
  blocks += packBlock({0, 1, 2, 3, 8, 9, 10, 11});
  scales += static_cast<char>(254);
  blocks += packBlock({7, 15, 5, 13});
  scales += static_cast<char>(27);

  std::vector<unsigned char> out(64 * 5, 0xee);
  uint64_t bad = 99;
  std::string why;
  ASSERT_TRUE(kiln::weights::dequantizeMxfp4(reinterpret_cast<const unsigned char *>(blocks.data()),
                                             reinterpret_cast<const unsigned char *>(scales.data()),
                                             5, out.data(), bad, why))
      << why;
  const std::vector<uint16_t> got = bf16Bits(out);
  EXPECT_EQ(got, referenceMxfp4(blocks, scales));
  // Spelled out: block 0 is the code table, then 0.5, 6, 0.5, 6, ...
  for (unsigned j = 0; j < 16; ++j)
    EXPECT_EQ(bf16Value(got[j]), static_cast<float>(kFp4[j])) << j;
  for (unsigned j = 16; j < 32; ++j)
    EXPECT_EQ(bf16Value(got[j]), j % 2 ? 6.0f : 0.5f) << j;
  EXPECT_EQ(bf16Value(got[32]), -6144.0f); // code 15 x 1024
  EXPECT_EQ(bf16Value(got[32 + 8]), 6144.0f);
  EXPECT_EQ(bf16Value(got[32 + 14]), 512.0f);
  EXPECT_EQ(got[64], 0x0020); // 0.5 x 2^-127
  EXPECT_EQ(got[64 + 3], 0x8020);
  EXPECT_EQ(got[64 + 7], 0x8000);
  EXPECT_EQ(bf16Value(got[96 + 3]), std::ldexp(1.5f, 127));
  EXPECT_EQ(bf16Value(got[96 + 6]), -std::ldexp(1.0f, 127));
  EXPECT_EQ(bf16Value(got[128]), std::ldexp(6.0f, -100));
  EXPECT_EQ(bf16Value(got[128 + 1]), -std::ldexp(6.0f, -100));
  // Little-endian bytes: element 1 of block 0 (0.5, 0x3f00).
  EXPECT_EQ(out[2], 0x00);
  EXPECT_EQ(out[3], 0x3f);
}

// A NaN scale, or a product too large for bf16, refuses the block; the blocks before it
// are written.
TEST(Mxfp4, RefusesNaNScalesAndOverflow) {
  const std::string blocks = packBlock({1, 2, 3}) + packBlock({1}) + packBlock({4, 1});
  std::vector<unsigned char> out(64 * 3, 0);
  uint64_t bad = 99;
  std::string why;
  auto run = [&](const std::string &scales) {
    std::fill(out.begin(), out.end(), 0);
    bad = 99;
    why.clear();
    return kiln::weights::dequantizeMxfp4(reinterpret_cast<const unsigned char *>(blocks.data()),
                                          reinterpret_cast<const unsigned char *>(scales.data()), 3,
                                          out.data(), bad, why);
  };
  EXPECT_FALSE(run(std::string("\x7f\xff\x7f", 3)));
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(why, "scale byte 0xff is NaN in E8M0");
  EXPECT_EQ(bf16Bits(out)[1], 0x3f80); // block 0 written (element 1: code 2, 1.0)
  EXPECT_EQ(bf16Bits(out)[32], 0u);    // block 1 not
  // Scale 254 (2^127) holds 0.5 but not 2: block 2, element 0.
  EXPECT_TRUE(run(std::string("\x7f\xfe\x7f", 3))) << why;
  EXPECT_FALSE(run(std::string("\x7f\x7f\xfe", 3)));
  EXPECT_EQ(bad, 2u);
  EXPECT_EQ(why, "scale 2^127 (byte 254) times its element 0, FP4 2 (code 4), is 2^128 or "
                 "more: it overflows bf16");
  // Scale 253 (2^126) holds 2 (2^127) but not 4 or 6.
  EXPECT_TRUE(run(std::string("\x7f\x7f\xfd", 3))) << why;
  EXPECT_EQ(bf16Value(bf16Bits(out)[64]), std::ldexp(1.0f, 127));
  const std::string big = packBlock({5, 13, 6});
  uint16_t unused;
  EXPECT_TRUE(kiln::weights::mxfp4Bf16(13, 253, unused));
  EXPECT_FALSE(kiln::weights::dequantizeMxfp4(reinterpret_cast<const unsigned char *>(big.data()),
                                              reinterpret_cast<const unsigned char *>("\xfd"), 1,
                                              out.data(), bad, why));
  EXPECT_EQ(bad, 0u);
  expectError(why, "its element 2, FP4 4 (code 6)");
  // Nothing to do: no blocks.
  EXPECT_TRUE(kiln::weights::dequantizeMxfp4(nullptr, nullptr, 0, nullptr, bad, why));
}

namespace {

struct FileTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string data;
};

// One safetensors file holding `tensors` in order.
std::string safetensorsOf(const std::vector<FileTensor> &tensors) {
  std::string header = "{", data;
  for (const FileTensor &t : tensors) {
    std::string shape;
    for (int64_t d : t.shape)
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" +
              t.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(data.size()) + "," + std::to_string(data.size() + t.data.size()) +
              "]}";
    data += t.data;
  }
  return safetensors(header + "}", data);
}

// The one weight of a manifest of `line`, or a failed assertion.
kiln::runtime::ManifestWeight weightOf(const std::string &line) {
  std::vector<std::string> lines = validLines();
  lines[12] = "weight_bytes 1099511627776"; // room for any test weight at offset 0
  lines.erase(lines.begin() + 21, lines.begin() + 25);
  lines.insert(lines.begin() + 21, line);
  Manifest m;
  std::string error;
  EXPECT_TRUE(parseManifest(join(lines), m, error)) << error;
  return m.weights.empty() ? kiln::runtime::ManifestWeight() : m.weights[0];
}

} // namespace

// gpt-oss's MXFP4 experts through the loader's host path (readMxfp4, then applyLayout, as
// lib/Runtime/Model.cpp's loadMxfp4 does): a checkpoint written here with gate_up's
// blocks [E, 2 x inter, hidden / 32, 16] (rows interleaved: 2i gate i, 2i + 1 up i) and
// down_proj's [E, hidden, inter / 32, 16]; the model gets [2, E, inter, hidden] (every
// expert's gate rows, then the up rows) and [E, hidden, inter].
TEST(Mxfp4, GptOssExpertsEndToEnd) {
  constexpr int E = 2, H = 64, I = 3, G = H / 32;
  TempDir dir;
  // Each block's scale names it (100 + its index), its codes run from its index.
  std::string gateUpBlocks, gateUpScales, downBlocks, downScales;
  for (int b = 0; b < E * 2 * I * G; ++b) {
    gateUpBlocks +=
        packBlock({static_cast<unsigned>(b % 16), static_cast<unsigned>(b + 5) % 16, 7, 9, 2});
    gateUpScales += static_cast<char>(100 + b);
  }
  constexpr int D = 32, DG = D / 32; // down_proj [E, H, 32]: inter 32 for a whole block
  for (int b = 0; b < E * H * DG; ++b) {
    downBlocks += packBlock({static_cast<unsigned>(b % 16), 3, 11});
    downScales += static_cast<char>(90 + b % 70);
  }
  ASSERT_TRUE(writeFile(
      dir / "model.safetensors",
      safetensorsOf(
          {{"model.layers.0.mlp.experts.gate_up_proj_blocks",
            "U8",
            {E, 2 * I, G, 16},
            gateUpBlocks},
           {"model.layers.0.mlp.experts.gate_up_proj_scales", "U8", {E, 2 * I, G}, gateUpScales},
           {"model.layers.0.mlp.experts.down_proj_scales", "U8", {E, H, DG}, downScales},
           {"model.layers.0.mlp.experts.down_proj_blocks", "U8", {E, H, DG, 16}, downBlocks},
           {"model.norm.weight", "BF16", {64}, pattern(128, 3)}})));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(dir.path(), error)) << error;

  const kiln::runtime::ManifestWeight gateUp =
      weightOf("weight model.layers.0.mlp.experts.gate_up_proj bf16 2x2x3x64 0 1536 mxfp4 "
               "from=2x6x64 rows=6:1,1");
  const kiln::runtime::ManifestWeight down =
      weightOf("weight model.layers.0.mlp.experts.down_proj bf16 2x64x32 0 8192 mxfp4");
  ASSERT_TRUE(gateUp.mxfp4 && down.mxfp4);

  std::vector<unsigned char> host(8192), packed, scratch;
  ASSERT_TRUE(kiln::weights::readMxfp4(index, gateUp, dir.path(), host.data(), packed, error))
      << error;
  // As read: the checkpoint's dequantized [E, 2 x inter, hidden].
  const std::vector<uint16_t> checkpoint = referenceMxfp4(gateUpBlocks, gateUpScales);
  EXPECT_EQ(bf16Bits(std::vector<unsigned char>(host.begin(), host.begin() + 1536)), checkpoint);
  ASSERT_TRUE(kiln::weights::applyLayout(host.data(), gateUp, scratch, error)) << error;
  std::vector<uint16_t> want;
  for (int part = 0; part < 2; ++part) // gate, then up
    for (int e = 0; e < E; ++e)
      for (int i = 0; i < I; ++i)
        for (int h = 0; h < H; ++h)
          want.push_back(checkpoint[(e * 2 * I + 2 * i + part) * H + h]);
  EXPECT_EQ(bf16Bits(std::vector<unsigned char>(host.begin(), host.begin() + 1536)), want);
  // Spelled out: the model's row 0 is expert 0's gate 0 (checkpoint row 0, blocks 0 and
  // 1), its row 3 expert 1's gate 0 (checkpoint row 6, blocks 12, 13), its row 6 expert
  // 0's up 0 (checkpoint row 1, blocks 2, 3).
  const std::vector<uint16_t> laid = bf16Bits(host);
  EXPECT_EQ(bf16Value(laid[0]), 0.0f);                             // block 0, code 0
  EXPECT_EQ(bf16Value(laid[1]), std::ldexp(3.0f, 100 - 127));      // code 5
  EXPECT_EQ(bf16Value(laid[32]), std::ldexp(0.5f, 101 - 127));     // block 1, code 1
  EXPECT_EQ(bf16Value(laid[3 * H]), std::ldexp(-2.0f, 112 - 127)); // block 12, code 12
  EXPECT_EQ(bf16Value(laid[6 * H]), std::ldexp(1.0f, 102 - 127));  // block 2, code 2

  // down_proj needs no layout: what it reads is what the model gets.
  ASSERT_TRUE(kiln::weights::readMxfp4(index, down, dir.path(), host.data(), packed, error))
      << error;
  ASSERT_TRUE(kiln::weights::applyLayout(host.data(), down, scratch, error)) << error;
  EXPECT_EQ(bf16Bits(host), referenceMxfp4(downBlocks, downScales));
  EXPECT_LE(packed.size(), 17u * E * H * DG); // the packed pieces, not the tensor

  // Errors name the weight, the tensor and the file or checkpoint.
  auto refused = [&](const kiln::runtime::ManifestWeight &w, const std::string &part) {
    EXPECT_FALSE(kiln::weights::readMxfp4(index, w, dir.path(), host.data(), packed, error));
    expectError(error, "weight '" + w.name + "' (mxfp4): ");
    expectError(error, part);
  };
  refused(weightOf("weight model.layers.1.mlp.experts.down_proj bf16 2x64x32 0 8192 mxfp4"),
          "'model.layers.1.mlp.experts.down_proj_blocks' (u8 2x64x1x16) is not in the "
          "checkpoint " +
              dir.path());
  refused(weightOf("weight model.norm.weight bf16 64 0 128 mxfp4"),
          "'model.norm.weight_blocks' (u8 2x16) is not in the checkpoint " + dir.path() +
              " (it holds 'model.norm.weight' itself: that checkpoint is not MXFP4)");
  refused(weightOf("weight model.layers.0.mlp.experts.down_proj bf16 2x32x64 0 8192 mxfp4"),
          "'model.layers.0.mlp.experts.down_proj_blocks' in " + dir / "model.safetensors" +
              " has shape 2x64x1x16, the model needs 2x32x2x16 (MXFP4 of 2x32x64)");
  refused(weightOf("weight model.layers.0.mlp.experts.gate_up_proj bf16 2x2x3x64 0 1536 mxfp4 "
                   "from=6x2x64"),
          "'model.layers.0.mlp.experts.gate_up_proj_blocks' in " + dir / "model.safetensors" +
              " has shape 2x6x2x16, the model needs 6x2x2x16");
  kiln::runtime::ManifestWeight plain = down;
  plain.mxfp4 = false;
  refused(plain, "not an MXFP4 bf16 weight");
}

// The scales' shape and both dtypes are checked; a bad scale is named by its index in
// the scales tensor, in a tensor of several pieces (more than 2^18 blocks) too.
TEST(Mxfp4, CheckpointErrorsAndPieces) {
  TempDir dir;
  const std::string blocks = pattern(16 * 4, 1);
  const std::string scales("\x70\x71\x72\x73", 4);
  ASSERT_TRUE(
      writeFile(dir / "a.safetensors",
                safetensorsOf({{"w_blocks", "U8", {2, 2, 16}, blocks},
                               {"w_scales", "I8", {2, 2}, scales},
                               {"v_blocks", "U8", {2, 2, 16}, blocks},
                               {"v_scales", "U8", {4}, scales},
                               {"u_blocks", "BF16", {2, 16}, blocks},
                               {"u_scales", "U8", {2, 2}, scales},
                               {"n_blocks", "U8", {2, 2, 16}, blocks},
                               {"n_scales", "U8", {2, 2}, std::string("\x70\x71\xff\x73", 4)}})));
  SafetensorsIndex index;
  std::string error;
  const std::string file = dir / "a.safetensors";
  ASSERT_TRUE(index.open(file, error)) << error;
  std::vector<unsigned char> host(256), packed;
  auto refused = [&](const char *name, const std::string &part) {
    const kiln::runtime::ManifestWeight w =
        weightOf(std::string("weight ") + name + " bf16 2x64 0 256 mxfp4");
    EXPECT_FALSE(kiln::weights::readMxfp4(index, w, file, host.data(), packed, error)) << name;
    expectError(error, std::string("weight '") + name + "' (mxfp4): ");
    expectError(error, part);
  };
  refused("w", "'w_scales' in " + file + " is i8, MXFP4 needs u8");
  refused("v", "'v_scales' in " + file + " has shape 4, the model needs 2x2 (MXFP4 of 2x64)");
  refused("u", "'u_blocks' in " + file + " is bf16, MXFP4 needs u8");
  refused("n", "'n_scales'[1, 0] in " + file + ": scale byte 0xff is NaN in E8M0");
  refused("missing", "'missing_blocks' (u8 2x2x16) is not in the checkpoint " + file);

  // 2^18 + 140 blocks: two pieces, the second one short; a NaN in the second piece is
  // named by its place in the whole tensor.
  constexpr int64_t rows = 7948, groups = 33; // 262284 blocks
  const std::string bigBlocks = pattern(16 * rows * groups, 11);
  std::string bigScales;
  for (int64_t g = 0; g < rows * groups; ++g)
    bigScales += static_cast<char>(100 + g % 50);
  const std::string name = "model.layers.0.mlp.experts.down_proj";
  ASSERT_TRUE(writeFile(dir / "model.safetensors",
                        safetensorsOf({{name + "_scales", "U8", {rows, groups}, bigScales},
                                       {name + "_blocks", "U8", {rows, groups, 16}, bigBlocks}})));
  SafetensorsIndex big;
  ASSERT_TRUE(big.open(dir.path(), error)) << error;
  const kiln::runtime::ManifestWeight w = weightOf(
      "weight " + name + " bf16 7948x1056 0 " + std::to_string(2 * rows * groups * 32) + " mxfp4");
  ASSERT_TRUE(w.mxfp4);
  std::vector<unsigned char> out(w.bytes);
  packed.clear();
  ASSERT_TRUE(kiln::weights::readMxfp4(big, w, dir.path(), out.data(), packed, error)) << error;
  EXPECT_EQ(bf16Bits(out), referenceMxfp4(bigBlocks, bigScales));
  EXPECT_EQ(packed.size(), 17u << 18); // one piece's blocks and scales, reused

  std::string nanScales = bigScales;
  nanScales[7946 * groups + 5] = '\xff';
  ASSERT_TRUE(writeFile(dir / "model.safetensors",
                        safetensorsOf({{name + "_scales", "U8", {rows, groups}, nanScales},
                                       {name + "_blocks", "U8", {rows, groups, 16}, bigBlocks}})));
  ASSERT_TRUE(big.open(dir.path(), error)) << error;
  EXPECT_FALSE(kiln::weights::readMxfp4(big, w, dir.path(), out.data(), packed, error));
  expectError(error, "'" + name + "_scales'[7946, 5] in " + dir / "model.safetensors" +
                         ": scale byte 0xff is NaN in E8M0");
}

// The same experts in both checkpoint forms load to the same bytes: transformers' bf16
// [E, in, out] under the compiler's bf16 lines (from=, transpose, rows=), and the
// published MXFP4 [E, out, in / 32, 16] under its mxfp4 lines (E 2, hidden 64, inter 32).
TEST(Mxfp4, SameBytesAsTheBf16Form) {
  constexpr int E = 2, H = 64, I = 32;
  TempDir dir;
  std::vector<FileTensor> bf16Tensors, mxfp4Tensors;
  std::vector<std::pair<std::string, std::string>> lines; // mxfp4 line, bf16 line
  for (const auto &[name, out, in] :
       {std::tuple<std::string, int, int>{"gate_up_proj", 2 * I, H}, {"down_proj", H, I}}) {
    std::string blocks = pattern(16 * E * out * in / 32, static_cast<unsigned>(out)), scales;
    for (int g = 0; g < E * out * in / 32; ++g)
      scales += static_cast<char>(110 + g % 20);
    const std::vector<uint16_t> values = referenceMxfp4(blocks, scales); // [E, out, in]
    std::string transposed(2 * values.size(), '\0');                     // [E, in, out]
    for (int e = 0; e < E; ++e)
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i) {
          const uint16_t v = values[(e * out + o) * in + i];
          const size_t at = 2 * ((static_cast<size_t>(e) * in + i) * out + o);
          transposed[at] = static_cast<char>(v & 0xff);
          transposed[at + 1] = static_cast<char>(v >> 8);
        }
    const std::string full = "model.layers.0.mlp.experts." + name;
    bf16Tensors.push_back({full, "BF16", {E, in, out}, transposed});
    mxfp4Tensors.push_back({full + "_blocks", "U8", {E, out, in / 32, 16}, blocks});
    mxfp4Tensors.push_back({full + "_scales", "U8", {E, out, in / 32}, scales});
  }
  lines.push_back({"weight model.layers.0.mlp.experts.gate_up_proj bf16 2x2x32x64 0 16384 mxfp4 "
                   "from=2x64x64 rows=64:1,1",
                   "weight model.layers.0.mlp.experts.gate_up_proj bf16 2x2x32x64 0 16384 "
                   "from=2x64x64 transpose rows=64:1,1"});
  lines.push_back({"weight model.layers.0.mlp.experts.down_proj bf16 2x64x32 0 8192 mxfp4",
                   "weight model.layers.0.mlp.experts.down_proj bf16 2x64x32 0 8192 "
                   "from=2x32x64 transpose"});
  ASSERT_TRUE(::mkdir((dir / "bf16").c_str(), 0755) == 0 &&
              ::mkdir((dir / "mxfp4").c_str(), 0755) == 0);
  ASSERT_TRUE(writeFile(dir / "bf16/model.safetensors", safetensorsOf(bf16Tensors)));
  ASSERT_TRUE(writeFile(dir / "mxfp4/model.safetensors", safetensorsOf(mxfp4Tensors)));
  SafetensorsIndex bf16Index, mxfp4Index;
  std::string error;
  ASSERT_TRUE(bf16Index.open(dir / "bf16", error)) << error;
  ASSERT_TRUE(mxfp4Index.open(dir / "mxfp4", error)) << error;
  std::vector<unsigned char> packed, scratch;
  for (const auto &[mxfp4Line, bf16Line] : lines) {
    const kiln::runtime::ManifestWeight quantized = weightOf(mxfp4Line), plain = weightOf(bf16Line);
    ASSERT_TRUE(quantized.mxfp4 && !plain.mxfp4 && plain.transpose);
    std::vector<unsigned char> fromMxfp4(quantized.bytes), fromBf16(plain.bytes);
    ASSERT_TRUE(kiln::weights::readMxfp4(mxfp4Index, quantized, dir / "mxfp4", fromMxfp4.data(),
                                         packed, error))
        << error;
    ASSERT_TRUE(kiln::weights::applyLayout(fromMxfp4.data(), quantized, scratch, error)) << error;
    const TensorInfo *info = bf16Index.find(plain.name);
    ASSERT_NE(info, nullptr);
    ASSERT_TRUE(bf16Index.read(*info, fromBf16.data(), error)) << error;
    ASSERT_TRUE(kiln::weights::applyLayout(fromBf16.data(), plain, scratch, error)) << error;
    EXPECT_EQ(fromMxfp4, fromBf16) << plain.name;
  }
}

// A tensor-parallel rank's manifest: the optional tp_ranks key and each sharded weight's
// shard=D/P, its only field.
TEST(Manifest, TensorParallelShards) {
  std::vector<std::string> lines = validLines();
  lines.insert(lines.begin() + 21, "tp_ranks 2");
  lines[22 + 1] = "weight model.layers.0.self_attn.q_proj.weight bf16 256x256 524288 131072 "
                  "shard=0/2";
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(join(lines), m, error)) << error;
  EXPECT_EQ(m.tpRanks, 2);
  EXPECT_EQ(m.weights[1].shardDim, 0);
  EXPECT_EQ(m.weights[1].shardParts, 2);
  EXPECT_EQ(m.weights[0].shardDim, -1);

  ASSERT_TRUE(parseManifest(join(validLines()), m, error)) << error;
  EXPECT_EQ(m.tpRanks, 1); // a whole model leaves the key out

  const std::string q = "weight model.layers.0.self_attn.q_proj.weight bf16 256x256 524288 131072 ";
  auto qWith = [&](const std::string &fields) { return with(23, (q + fields).c_str()); };
  expectManifestError(qWith("shard=2/2"), 23, "shard=2/2: dimension 2 of shape 256x256");
  expectManifestError(qWith("shard=0"), 23, "shard=0 is not of the form shard=D/P");
  expectManifestError(qWith("shard=0/0"), 23, "shard=0/0 is not of the form shard=D/P");
  expectManifestError(qWith("shard=0/2 transpose"), 23, "a sharded weight takes no other field");
  expectManifestError(qWith("shard=0/2 shard=1/2"), 23, "duplicate field 'shard='");
  // Segments (one rank's sizes, summing to the shape's dimension) and stacks (never
  // along dimension 0, which indexes the stacked tensors).
  Manifest seg;
  ASSERT_TRUE(parseManifest(join(qWith("shard=0/2:128,64,64")), seg, error)) << error;
  EXPECT_EQ(seg.weights[1].shardSegments, (std::vector<int64_t>{128, 64, 64}));
  expectManifestError(qWith("shard=0/2:128,64"), 23,
                      "segments must be sizes >= 1 that sum to dimension 0 of shape 256x256");
  expectManifestError(qWith("shard=0/2:256,0"), 23, "segments must be sizes >= 1");
  expectManifestError(qWith("shard=0/2:"), 23, "segments must be sizes >= 1");
  Manifest stack;
  ASSERT_TRUE(parseManifest(join(with(23, "weight e.*.w bf16 2x256x128 524288 131072 shard=1/2")),
                            stack, error))
      << error;
  EXPECT_EQ(stack.weights[1].shardDim, 1);
  expectManifestError(with(23, "weight e.*.w bf16 2x256x128 524288 131072 shard=0/2"), 23,
                      "a stacked weight is sharded along a dimension of each stacked tensor");
  expectManifestError(with(21, "tp_ranks 0"), 21, "tp_ranks is 0 (the tensor-parallel ranks");
  expectManifestError(with(21, "tp_ranks 4096"), 21, "tp_ranks is too large");
}

// The plan's reserve for a rank's NCCL communicator: the optional collective_bytes key.
TEST(Manifest, CollectiveBytes) {
  std::vector<std::string> lines = validLines();
  lines.insert(lines.begin() + 21, "collective_bytes 612368384");
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(join(lines), m, error)) << error;
  EXPECT_EQ(m.collectiveBytes, 612368384u);
  ASSERT_TRUE(parseManifest(join(validLines()), m, error)) << error;
  EXPECT_EQ(m.collectiveBytes, 0u); // a model without collectives leaves the key out
  expectManifestError(with(21, "collective_bytes -1"), 21, "collective_bytes");
  expectManifestError(with(21, "collective_bytes"), 21, "collective_bytes BYTES");
  lines.insert(lines.begin() + 22, "collective_bytes 1");
  EXPECT_FALSE(parseManifest(join(lines), m, error));
  EXPECT_NE(error.find("collective_bytes"), std::string::npos) << error;
}

// A tensor-parallel rank's weight: block rank * P / ranks of the checkpoint tensor along
// the shard dimension, read as runs from the whole tensor's bytes.
TEST(Shard, RanksReadTheirBlocks) {
  TempDir dir;
  // A bf16 [4, 6] tensor whose element (r, c) holds the 16-bit value r * 6 + c.
  std::string whole;
  for (uint16_t v = 0; v < 24; ++v)
    whole += std::string(reinterpret_cast<const char *>(&v), 2);
  const std::string file = dir / "model.safetensors";
  ASSERT_TRUE(writeFile(file, safetensorsOf({{"w", "BF16", {4, 6}, whole},
                                             {"f", "F32", {4, 6}, whole + whole}})));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(file, error)) << error;
  auto read = [&](const std::string &line, int rank, int ranks) {
    const kiln::runtime::ManifestWeight w = weightOf(line);
    std::vector<uint16_t> got(w.bytes / 2, 0xffff);
    EXPECT_TRUE(kiln::weights::readShard(index, w, rank, ranks, file,
                                         reinterpret_cast<unsigned char *>(got.data()), error))
        << error;
    return got;
  };
  // Rows: rank 1 of 2 holds rows 2-3.
  EXPECT_EQ(read("weight w bf16 2x6 0 24 shard=0/2", 1, 2),
            (std::vector<uint16_t>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}));
  // Columns: rank 0 of 2 holds columns 0-2 of every row, rank 1 columns 3-5.
  EXPECT_EQ(read("weight w bf16 4x3 0 24 shard=1/2", 0, 2),
            (std::vector<uint16_t>{0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20}));
  EXPECT_EQ(read("weight w bf16 4x3 0 24 shard=1/2", 1, 2),
            (std::vector<uint16_t>{3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23}));
  // Two parts over four ranks (KV heads fewer than the ranks): ranks 2 and 3 share block 1.
  EXPECT_EQ(read("weight w bf16 2x6 0 24 shard=0/2", 2, 4), read("weight w bf16 2x6 0 24 shard=0/2", 3, 4));
  EXPECT_EQ(read("weight w bf16 2x6 0 24 shard=0/2", 3, 4),
            read("weight w bf16 2x6 0 24 shard=0/2", 1, 2));

  auto refused = [&](const std::string &line, int rank, int ranks, const std::string &part) {
    const kiln::runtime::ManifestWeight w = weightOf(line);
    std::vector<unsigned char> out(w.bytes);
    EXPECT_FALSE(kiln::weights::readShard(index, w, rank, ranks, file, out.data(), error))
        << line;
    expectError(error, part);
  };
  refused("weight w bf16 3x6 0 36 shard=0/2", 0, 2,
          "weight 'w' (rank 0 of 2): 'w' in " + file +
              " has shape 4x6, the model needs 6x6 (2 blocks of 3x6 along dimension 0)");
  refused("weight f bf16 2x6 0 24 shard=0/2", 0, 2, "'f' in " + file + " is f32, the model needs bf16");
  refused("weight missing bf16 2x6 0 24 shard=0/2", 1, 2,
          "weight 'missing' (rank 1 of 2): 'missing' (bf16 4x6) is not in the checkpoint " + file);
  refused("weight w bf16 2x6 0 24 shard=0/2", 0, 3, "shard=0/2: its parts do not divide the ranks");
  refused("weight w bf16 4x6 0 48", 0, 1, "not a sharded weight");
}

// A fused projection's segments (Mamba2's in_proj [z | x | B | C | dt]): a rank reads its
// block of each segment, in order; and a stack of experts, each expert's block.
TEST(Shard, SegmentsAndStacks) {
  TempDir dir;
  // bf16 [6, 2] whose element (r, c) is r * 2 + c: rows are segments of 4 and 2 rows.
  std::string fused, e0, e1;
  for (uint16_t v = 0; v < 12; ++v)
    fused += std::string(reinterpret_cast<const char *>(&v), 2);
  // Two experts [2, 4], expert e's element (r, c) is 100 e + r * 4 + c.
  for (uint16_t v = 0; v < 8; ++v) {
    const uint16_t w = v + 100;
    e0 += std::string(reinterpret_cast<const char *>(&v), 2);
    e1 += std::string(reinterpret_cast<const char *>(&w), 2);
  }
  const std::string file = dir / "model.safetensors";
  // Mamba2's A_log saved in bf16 (1, 2, -3, 0.5) for an f32 weight: widened.
  std::string aLog;
  for (uint16_t v : {0x3f80, 0x4000, 0xc040, 0x3f00})
    aLog += std::string(reinterpret_cast<const char *>(&v), 2);
  ASSERT_TRUE(writeFile(file, safetensorsOf({{"fused", "BF16", {6, 2}, fused},
                                             {"experts.0.w", "BF16", {2, 4}, e0},
                                             {"experts.1.w", "BF16", {2, 4}, e1},
                                             {"a_log", "BF16", {4}, aLog}})));
  SafetensorsIndex index;
  std::string error;
  ASSERT_TRUE(index.open(file, error)) << error;
  auto read = [&](const std::string &line, int rank, int ranks) {
    const kiln::runtime::ManifestWeight w = weightOf(line);
    std::vector<uint16_t> got(w.bytes / 2, 0xffff);
    EXPECT_TRUE(kiln::weights::readShard(index, w, rank, ranks, file,
                                         reinterpret_cast<unsigned char *>(got.data()), error))
        << error;
    return got;
  };
  // Segments of 4 and 2 rows, each halved: rank 0 holds rows 0-1 and 4, rank 1 rows 2-3
  // and 5.
  EXPECT_EQ(read("weight fused bf16 3x2 0 12 shard=0/2:2,1", 0, 2),
            (std::vector<uint16_t>{0, 1, 2, 3, 8, 9}));
  EXPECT_EQ(read("weight fused bf16 3x2 0 12 shard=0/2:2,1", 1, 2),
            (std::vector<uint16_t>{4, 5, 6, 7, 10, 11}));
  // Segments along columns: every row's block of each (here one segment of 1 column).
  EXPECT_EQ(read("weight fused bf16 6x1 0 12 shard=1/2:1", 1, 2),
            (std::vector<uint16_t>{1, 3, 5, 7, 9, 11}));
  // Experts' gate/up: rows (their intermediate features) of every expert; down: columns.
  EXPECT_EQ(read("weight experts.*.w bf16 2x1x4 0 16 shard=1/2", 1, 2),
            (std::vector<uint16_t>{4, 5, 6, 7, 104, 105, 106, 107}));
  EXPECT_EQ(read("weight experts.*.w bf16 2x2x2 0 16 shard=2/2", 0, 2),
            (std::vector<uint16_t>{0, 1, 4, 5, 100, 101, 104, 105}));
  {
    const kiln::runtime::ManifestWeight w = weightOf("weight a_log f32 2 0 8 shard=0/2");
    std::vector<float> got(2, 0.0f);
    ASSERT_TRUE(kiln::weights::readShard(index, w, 1, 2, file,
                                         reinterpret_cast<unsigned char *>(got.data()), error))
        << error;
    EXPECT_EQ(got, (std::vector<float>{-3.0f, 0.5f}));
  }

  auto refused = [&](const std::string &line, int rank, int ranks, const std::string &part) {
    const kiln::runtime::ManifestWeight w = weightOf(line);
    std::vector<unsigned char> out(w.bytes);
    EXPECT_FALSE(kiln::weights::readShard(index, w, rank, ranks, file, out.data(), error)) << line;
    expectError(error, part);
  };
  refused("weight experts.*.w bf16 2x2x4 0 32 shard=1/2", 0, 2,
          "'experts.0.w' in " + file + " has shape 2x4, the model needs 4x4");
  refused("weight fused bf16 4x2 0 16 shard=0/2:3,1", 0, 2,
          "has shape 6x2, the model needs 8x2 (2 blocks of 4x2 along dimension 0, in each of "
          "its segments)");
}

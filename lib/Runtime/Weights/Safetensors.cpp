// Safetensors checkpoints: validated headers, sharded indexes and bounded reads.
//
// File layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON (an object
// of name -> {"dtype", "shape", "data_offsets"} plus an optional "__metadata__" object of
// strings), then the data buffer the offsets point into.
#include "kiln/Runtime/Safetensors.h"

#include "Json.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_set>
#include <utility>

namespace kiln::weights {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u * 1000 * 1000;  // the reference reader's cap
constexpr uint64_t kMaxIndexBytes = 100u * 1000 * 1000;
constexpr unsigned kMaxJsonDepth = 64;
constexpr size_t kMaxRank = 64;
constexpr uint64_t kMaxReadChunk = uint64_t(1) << 30;  // Linux reads at most ~2 GiB at once

struct DtypeEntry {
  Dtype dtype;
  const char *kiln;
  const char *safetensors;
  size_t bytes;
};
constexpr DtypeEntry kDtypes[] = {
    {Dtype::bf16, "bf16", "BF16", 2},        {Dtype::f16, "f16", "F16", 2},
    {Dtype::f32, "f32", "F32", 4},           {Dtype::f64, "f64", "F64", 8},
    {Dtype::i64, "i64", "I64", 8},           {Dtype::i32, "i32", "I32", 4},
    {Dtype::i16, "i16", "I16", 2},           {Dtype::i8, "i8", "I8", 1},
    {Dtype::u8, "u8", "U8", 1},              {Dtype::boolean, "bool", "BOOL", 1},
    {Dtype::f8_e4m3, "f8_e4m3", "F8_E4M3", 1}, {Dtype::f8_e5m2, "f8_e5m2", "F8_E5M2", 1},
};

Dtype dtypeFromSafetensors(std::string_view name) {
  for (const DtypeEntry &e : kDtypes)
    if (name == e.safetensors)
      return e.dtype;
  return Dtype::unknown;
}

// A name fit for an error message: quoted, non-printable bytes escaped, long names cut.
std::string quoted(std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "'";
  size_t limit = 200;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == limit) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

std::string errnoText(int err) { return std::strerror(err); }

std::string joinPath(const std::string &dir, const std::string &name) {
  if (dir.empty())
    return name;
  if (dir.back() == '/')
    return dir + name;
  return dir + "/" + name;
}

std::string parentDir(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return "";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

class FileCloser {
public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  int release() { return std::exchange(fd_, -1); }

private:
  int fd_;
};

// Opens `path` read-only. O_NONBLOCK keeps a FIFO from blocking the open; anything but
// a regular file is refused.
bool openRegular(const std::string &path, int &fd, uint64_t &size, std::string &error) {
  int f;
  do {
    f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (f < 0 && errno == EINTR);
  if (f < 0) {
    error = path + ": cannot open: " + errnoText(errno);
    return false;
  }
  FileCloser closer(f);
  struct stat st;
  if (::fstat(f, &st) != 0) {
    error = path + ": cannot stat: " + errnoText(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    error = path + ": not a regular file";
    return false;
  }
  int flags = ::fcntl(f, F_GETFL);
  if (flags >= 0)
    (void)::fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
  fd = closer.release();
  size = static_cast<uint64_t>(st.st_size);
  return true;
}

// Reads up to `bytes` at `offset`, looping over short reads and EINTR. `got` is what was
// read; got < bytes without an error means the file ended. Returns false (errno in
// `err`) on a read error.
bool readAt(int fd, void *dst, uint64_t bytes, uint64_t offset, uint64_t &got, int &err) {
  got = 0;
  auto *out = static_cast<unsigned char *>(dst);
  while (got < bytes) {
    uint64_t chunk = bytes - got < kMaxReadChunk ? bytes - got : kMaxReadChunk;
    ssize_t r = ::pread(fd, out + got, static_cast<size_t>(chunk), static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      err = errno;
      return false;
    }
    if (r == 0)
      return true;
    got += static_cast<uint64_t>(r);
  }
  return true;
}

uint64_t currentSize(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// Reads a whole small file (at most `limit` bytes) that is already open.
bool readWhole(int fd, const std::string &path, uint64_t size, uint64_t limit, std::string &text,
               std::string &error) {
  if (size > limit) {
    error = path + ": " + std::to_string(size) + " bytes is larger than the limit of " +
            std::to_string(limit) + " bytes";
    return false;
  }
  text.assign(static_cast<size_t>(size), '\0');
  uint64_t got;
  int err = 0;
  if (!readAt(fd, text.data(), size, 0, got, err)) {
    error = path + ": read error: " + errnoText(err);
    return false;
  }
  if (got != size) {
    error = path + ": the file shrank while it was read";
    return false;
  }
  return true;
}

// Parses and validates the header of one open safetensors file.
bool parseHeader(const std::string &path, int fd, uint64_t fileSize, std::vector<TensorInfo> &out,
                 std::string &error) {
  out.clear();
  if (fileSize < 8) {
    error = path + ": " + std::to_string(fileSize) +
            " bytes is too small for a safetensors file (an 8-byte header length comes first)";
    return false;
  }
  unsigned char lenBytes[8];
  uint64_t got;
  int err = 0;
  if (!readAt(fd, lenBytes, 8, 0, got, err)) {
    error = path + ": read error: " + errnoText(err);
    return false;
  }
  if (got != 8) {
    error = path + ": the file shrank while it was read";
    return false;
  }
  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i)
    headerBytes = (headerBytes << 8) | lenBytes[i];
  if (headerBytes > fileSize - 8) {
    error = path + ": header length " + std::to_string(headerBytes) +
            " is larger than the rest of the file (" + std::to_string(fileSize - 8) +
            " bytes): truncated or not a safetensors file";
    return false;
  }
  if (headerBytes > kMaxHeaderBytes) {
    error = path + ": header length " + std::to_string(headerBytes) + " exceeds the limit of " +
            std::to_string(kMaxHeaderBytes) + " bytes";
    return false;
  }
  std::string header(static_cast<size_t>(headerBytes), '\0');
  if (!readAt(fd, header.data(), headerBytes, 8, got, err)) {
    error = path + ": read error: " + errnoText(err);
    return false;
  }
  if (got != headerBytes) {
    error = path + ": the file shrank while it was read";
    return false;
  }
  const uint64_t dataStart = 8 + headerBytes;
  const uint64_t dataBytes = fileSize - dataStart;

  json::Reader reader(header, kMaxJsonDepth);
  std::string context;  // what was being read, for messages
  auto jsonError = [&]() {
    error = path + ": header: " + (context.empty() ? "" : context + ": ") + reader.error();
    return false;
  };
  auto headerError = [&](const std::string &what) {
    error = path + ": header: " + what;
    return false;
  };

  if (reader.peek() != json::Kind::Object && !reader.failed())
    reader.fail("the header must be a JSON object");
  std::unordered_set<std::string> names;
  std::string key;
  bool more;
  if (!reader.beginObject())
    return jsonError();
  for (;;) {
    context.clear();
    if (!reader.nextKey(more, key))
      return jsonError();
    if (!more)
      break;
    if (key == "__metadata__") {
      context = "__metadata__";
      if (!reader.beginObject())
        return jsonError();
      std::string metaKey, value;
      for (;;) {
        if (!reader.nextKey(more, metaKey))
          return jsonError();
        if (!more)
          break;
        context = "__metadata__: " + quoted(metaKey);
        if (!reader.readString(value))
          return jsonError();
      }
      continue;
    }
    if (key.empty())
      return headerError("a tensor with an empty name");
    if (!names.insert(key).second)
      return headerError("tensor " + quoted(key) + " appears twice");
    context = "tensor " + quoted(key);

    TensorInfo info;
    info.name = key;
    info.file = path;
    std::string dtypeText;
    uint64_t begin = 0, end = 0;
    bool haveDtype = false, haveShape = false, haveOffsets = false;
    std::string field;
    if (!reader.beginObject())
      return jsonError();
    for (;;) {
      if (!reader.nextKey(more, field))
        return jsonError();
      if (!more)
        break;
      if (field == "dtype") {
        if (haveDtype)
          return headerError(context + ": \"dtype\" appears twice");
        haveDtype = true;
        if (!reader.readString(dtypeText))
          return jsonError();
      } else if (field == "shape") {
        if (haveShape)
          return headerError(context + ": \"shape\" appears twice");
        haveShape = true;
        if (!reader.beginArray())
          return jsonError();
        for (;;) {
          if (!reader.nextItem(more))
            return jsonError();
          if (!more)
            break;
          uint64_t dim;
          if (!reader.readUnsigned(dim))
            return jsonError();
          if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            return headerError(context + ": shape dimension " + std::to_string(dim) + " is too large");
          if (info.shape.size() == kMaxRank)
            return headerError(context + ": shape has more than " + std::to_string(kMaxRank) + " dimensions");
          info.shape.push_back(static_cast<int64_t>(dim));
        }
      } else if (field == "data_offsets") {
        if (haveOffsets)
          return headerError(context + ": \"data_offsets\" appears twice");
        haveOffsets = true;
        uint64_t values[2];
        size_t count = 0;
        if (!reader.beginArray())
          return jsonError();
        for (;;) {
          if (!reader.nextItem(more))
            return jsonError();
          if (!more)
            break;
          if (count == 2)
            return headerError(context + ": data_offsets must hold exactly two numbers [begin, end]");
          if (!reader.readUnsigned(values[count]))
            return jsonError();
          ++count;
        }
        if (count != 2)
          return headerError(context + ": data_offsets must hold exactly two numbers [begin, end]");
        begin = values[0];
        end = values[1];
      } else {
        // Unknown fields are ignored, as the reference reader does.
        if (!reader.skipValue())
          return jsonError();
      }
    }
    if (!haveDtype || !haveShape || !haveOffsets)
      return headerError(context + ": missing \"" +
                         (!haveDtype ? "dtype" : !haveShape ? "shape" : "data_offsets") + "\"");
    info.dtype = dtypeFromSafetensors(dtypeText);
    if (info.dtype == Dtype::unknown)
      return headerError(context + ": unsupported dtype " + quoted(dtypeText));
    uint64_t elements = 1;
    for (int64_t d : info.shape)
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements))
        return headerError(context + ": the shape's element count overflows 64 bits");
    uint64_t expected;
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dtypeBytes(info.dtype)), &expected))
      return headerError(context + ": the shape's byte size overflows 64 bits");
    if (begin > end)
      return headerError(context + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                         "] end before they begin");
    if (end > dataBytes)
      return headerError(context + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                         "] run past the data buffer (" + std::to_string(dataBytes) + " bytes)");
    if (end - begin != expected)
      return headerError(context + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                         "] hold " + std::to_string(end - begin) + " bytes, but the shape and dtype " +
                         dtypeText + " need " + std::to_string(expected));
    info.dataOffset = dataStart + begin;
    info.bytes = expected;
    out.push_back(std::move(info));
  }
  context.clear();
  if (!reader.finish())
    return jsonError();
  return true;
}

// Shard names come from an untrusted index: a plain file name in the index's directory.
bool validShardName(const std::string &name) {
  if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
      name.find('\0') != std::string::npos || name.find("..") != std::string::npos)
    return false;
  return name != ".";
}

} // namespace

const char *dtypeName(Dtype dtype) {
  for (const DtypeEntry &e : kDtypes)
    if (e.dtype == dtype)
      return e.kiln;
  return "unknown";
}

size_t dtypeBytes(Dtype dtype) {
  for (const DtypeEntry &e : kDtypes)
    if (e.dtype == dtype)
      return e.bytes;
  return 0;
}

SafetensorsIndex::~SafetensorsIndex() { close(); }

SafetensorsIndex::SafetensorsIndex(SafetensorsIndex &&other) noexcept
    : tensors_(std::move(other.tensors_)), tensorFile_(std::move(other.tensorFile_)),
      byName_(std::move(other.byName_)), files_(std::move(other.files_)) {
  other.tensors_.clear();
  other.tensorFile_.clear();
  other.byName_.clear();
  other.files_.clear();
}

SafetensorsIndex &SafetensorsIndex::operator=(SafetensorsIndex &&other) noexcept {
  if (this != &other) {
    close();
    tensors_ = std::move(other.tensors_);
    tensorFile_ = std::move(other.tensorFile_);
    byName_ = std::move(other.byName_);
    files_ = std::move(other.files_);
    other.tensors_.clear();
    other.tensorFile_.clear();
    other.byName_.clear();
    other.files_.clear();
  }
  return *this;
}

void SafetensorsIndex::close() {
  for (File &f : files_)
    if (f.fd >= 0)
      ::close(f.fd);
  files_.clear();
  tensors_.clear();
  tensorFile_.clear();
  byName_.clear();
}

bool SafetensorsIndex::open(const std::string &path, std::string &error) {
  close();
  error.clear();
  SafetensorsIndex next;

  // Opens one safetensors file into `next`, returning its tensors.
  auto openFile = [&](const std::string &file, std::vector<TensorInfo> &infos, size_t &fileIndex) {
    int fd;
    uint64_t size;
    if (!openRegular(file, fd, size, error))
      return false;
    next.files_.push_back(File{file, fd});
    fileIndex = next.files_.size() - 1;
    return parseHeader(file, fd, size, infos, error);
  };
  auto openSingle = [&](const std::string &file) {
    std::vector<TensorInfo> infos;
    size_t fileIndex;
    if (!openFile(file, infos, fileIndex))
      return false;
    next.tensors_ = std::move(infos);
    next.tensorFile_.assign(next.tensors_.size(), fileIndex);
    return true;
  };
  auto openIndex = [&](const std::string &indexPath, const std::string &dir) {
    int fd;
    uint64_t size;
    if (!openRegular(indexPath, fd, size, error))
      return false;
    FileCloser closer(fd);
    std::string text;
    if (!readWhole(fd, indexPath, size, kMaxIndexBytes, text, error))
      return false;

    // weight_map, in order, and the shards in order of first mention.
    std::vector<std::pair<std::string, size_t>> entries;  // tensor, shard number
    std::vector<std::string> shards;
    std::unordered_map<std::string, size_t> shardNumber;
    std::unordered_set<std::string> seen;
    json::Reader reader(text, kMaxJsonDepth);
    std::string context;
    auto jsonError = [&]() {
      error = indexPath + ": " + (context.empty() ? "" : context + ": ") + reader.error();
      return false;
    };
    bool more, haveMap = false;
    std::string key, tensor, shard;
    if (reader.peek() != json::Kind::Object && !reader.failed())
      reader.fail("the index must be a JSON object");
    if (!reader.beginObject())
      return jsonError();
    for (;;) {
      context.clear();
      if (!reader.nextKey(more, key))
        return jsonError();
      if (!more)
        break;
      if (key != "weight_map") {
        context = quoted(key);
        if (!reader.skipValue())  // "metadata" and anything else: not needed
          return jsonError();
        continue;
      }
      if (haveMap) {
        error = indexPath + ": \"weight_map\" appears twice";
        return false;
      }
      haveMap = true;
      context = "weight_map";
      if (!reader.beginObject())
        return jsonError();
      for (;;) {
        context = "weight_map";
        if (!reader.nextKey(more, tensor))
          return jsonError();
        if (!more)
          break;
        context = "weight_map: tensor " + quoted(tensor);
        if (!reader.readString(shard))
          return jsonError();
        if (!seen.insert(tensor).second) {
          error = indexPath + ": weight_map names tensor " + quoted(tensor) + " twice";
          return false;
        }
        if (!validShardName(shard)) {
          error = indexPath + ": weight_map: tensor " + quoted(tensor) + ": shard name " + quoted(shard) +
                  " is not a plain file name in the index's directory";
          return false;
        }
        auto [it, added] = shardNumber.emplace(shard, shards.size());
        if (added)
          shards.push_back(shard);
        entries.emplace_back(tensor, it->second);
      }
    }
    context.clear();
    if (!reader.finish())
      return jsonError();
    if (!haveMap) {
      error = indexPath + ": no \"weight_map\"";
      return false;
    }

    // Open each shard once; keep the tensors the weight_map assigns to it.
    std::vector<std::vector<size_t>> entriesOf(shards.size());
    for (size_t e = 0; e < entries.size(); ++e)
      entriesOf[entries[e].second].push_back(e);
    std::vector<TensorInfo> resolved(entries.size());
    std::vector<size_t> resolvedFile(entries.size());
    for (size_t s = 0; s < shards.size(); ++s) {
      std::vector<TensorInfo> infos;
      size_t fileIndex;
      if (!openFile(joinPath(dir, shards[s]), infos, fileIndex)) {
        error = indexPath + ": shard " + quoted(shards[s]) + " (holding tensor " +
                quoted(entries[entriesOf[s].front()].first) + "): " + error;
        return false;
      }
      std::unordered_map<std::string_view, size_t> inShard;
      for (size_t i = 0; i < infos.size(); ++i)
        inShard.emplace(infos[i].name, i);
      for (size_t e : entriesOf[s]) {
        auto it = inShard.find(entries[e].first);
        if (it == inShard.end()) {
          error = indexPath + ": weight_map puts tensor " + quoted(entries[e].first) + " in shard " +
                  quoted(shards[s]) + ", but " + next.files_[fileIndex].path + " does not hold it";
          return false;
        }
        resolved[e] = std::move(infos[it->second]);
        resolvedFile[e] = fileIndex;
      }
    }
    next.tensors_ = std::move(resolved);
    next.tensorFile_ = std::move(resolvedFile);
    return true;
  };

  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    error = path + ": cannot open: " + errnoText(errno);
    return false;
  }
  bool ok;
  if (S_ISDIR(st.st_mode)) {
    std::string single = joinPath(path, "model.safetensors");
    std::string index = joinPath(path, "model.safetensors.index.json");
    struct stat probe;  // lstat: a dangling link is reported as such, not skipped
    if (::lstat(single.c_str(), &probe) == 0) {
      ok = openSingle(single);
    } else if (::lstat(index.c_str(), &probe) == 0) {
      ok = openIndex(index, path);
    } else {
      error = path + ": holds neither model.safetensors nor model.safetensors.index.json";
      return false;
    }
  } else if (endsWith(path, ".index.json")) {
    ok = openIndex(path, parentDir(path));
  } else {
    ok = openSingle(path);
  }
  if (!ok)
    return false;  // `next` closes what it opened

  for (size_t i = 0; i < next.tensors_.size(); ++i)
    next.byName_.emplace(next.tensors_[i].name, i);
  *this = std::move(next);
  return true;
}

const TensorInfo *SafetensorsIndex::find(const std::string &name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &tensors_[it->second];
}

const std::vector<TensorInfo> &SafetensorsIndex::tensors() const { return tensors_; }

bool SafetensorsIndex::read(const TensorInfo &info, void *dst, std::string &error) const {
  return readRange(info, 0, info.bytes, dst, error);
}

bool SafetensorsIndex::readRange(const TensorInfo &info, uint64_t offset, uint64_t bytes, void *dst,
                                 std::string &error) const {
  auto it = byName_.find(info.name);
  if (it == byName_.end()) {
    error = "tensor " + quoted(info.name) + " (" + info.file + "): not in this index";
    return false;
  }
  const TensorInfo &t = tensors_[it->second];
  if (t.file != info.file || t.dataOffset != info.dataOffset || t.bytes != info.bytes) {
    error = "tensor " + quoted(info.name) + " (" + info.file + "): does not match the index's record of it";
    return false;
  }
  if (offset > t.bytes || bytes > t.bytes - offset) {
    error = "tensor " + quoted(t.name) + " (" + t.file + "): " + std::to_string(bytes) +
            " bytes at byte " + std::to_string(offset) + " lie outside its " +
            std::to_string(t.bytes) + " bytes";
    return false;
  }
  if (bytes == 0)
    return true;
  if (!dst) {
    error = "tensor " + quoted(t.name) + " (" + t.file + "): no destination buffer";
    return false;
  }
  int fd = files_[tensorFile_[it->second]].fd;
  uint64_t got;
  int err = 0;
  if (!readAt(fd, dst, bytes, t.dataOffset + offset, got, err)) {
    error = "tensor " + quoted(t.name) + ": " + t.file + ": read error: " + errnoText(err);
    return false;
  }
  if (got != bytes) {
    error = "tensor " + quoted(t.name) + ": " + t.file + " is truncated: its data runs to byte " +
            std::to_string(t.dataOffset + t.bytes) + ", but the file now ends at byte " +
            std::to_string(currentSize(fd)) + " (it shrank after it was opened)";
    return false;
  }
  return true;
}

} // namespace kiln::weights

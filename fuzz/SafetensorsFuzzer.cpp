// libFuzzer target kiln-fuzz-safetensors: the safetensors reader
// (kiln::weights::SafetensorsIndex). Built with KILN_BUILD_FUZZERS (fuzz/CMakeLists.txt),
// run by scripts/fuzz.sh; seeds in test/Fuzz/corpus/safetensors/.
// The first input byte picks what the rest is: even -> one .safetensors file, odd -> a
// model.safetensors.index.json next to a fixed valid shard "s.safetensors". Every
// tensor an accepted input describes is read back.
#include "kiln/Runtime/Safetensors.h"

#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

bool writeFile(const std::string &path, const uint8_t *data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return false;
  size_t done = 0;
  while (done < size) {
    ssize_t w = ::write(fd, data + done, size - done);
    if (w <= 0) {
      ::close(fd);
      return false;
    }
    done += static_cast<size_t>(w);
  }
  return ::close(fd) == 0;
}

// The directory the inputs are written to, removed when the fuzzer exits normally.
std::string *gDir = nullptr;

void removeWorkDir() {
  for (const char *name : {"/s.safetensors", "/input.safetensors", "/model.safetensors.index.json"})
    ::unlink((*gDir + name).c_str());
  ::rmdir(gDir->c_str());
}

const std::string &workDir() {
  static std::string dir = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-safetensors-fuzz-XXXXXX";
    const char *made = ::mkdtemp(pattern.data());
    if (!made)
      std::abort();
    std::string d = made;
    // A valid shard for the index mode: "a" BF16 [2], "b" F32 [1].
    const std::string header = R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    std::string shard(8, '\0');
    for (int i = 0; i < 8; ++i)
      shard[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    shard += header + "01234567";
    if (!writeFile(d + "/s.safetensors", reinterpret_cast<const uint8_t *>(shard.data()), shard.size()))
      std::abort();
    return d;
  }();
  if (!gDir) {
    gDir = &dir;
    std::atexit(removeWorkDir);
  }
  return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const std::string &dir = workDir();
  bool indexMode = data[0] & 1;
  std::string path = dir + (indexMode ? "/model.safetensors.index.json" : "/input.safetensors");
  if (!writeFile(path, data + 1, size - 1))
    return 0;
  kiln::weights::SafetensorsIndex index;
  std::string error;
  if (index.open(path, error)) {
    std::vector<unsigned char> buffer;
    for (const kiln::weights::TensorInfo &t : index.tensors()) {
      if (index.find(t.name) != &t)
        std::abort();
      if (t.bytes > size)  // data always lies inside the (small) input files
        std::abort();
      buffer.resize(static_cast<size_t>(t.bytes));
      if (!index.read(t, buffer.data(), error))
        std::abort();
    }
  } else if (error.empty()) {
    std::abort();
  }
  ::unlink(path.c_str());
  return 0;
}

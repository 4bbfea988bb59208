// Reading Hugging Face safetensors checkpoints (plain C++17, no CUDA, no LLVM).
//
// A checkpoint is one `model.safetensors` or a `model.safetensors.index.json` naming
// shards in the same directory. Files are untrusted: every header is validated
// (bounded JSON, dtypes, shapes, offsets) before anything is exposed, and every error
// names the file and what is wrong. Files are opened read-only and never written.
#ifndef KILN_RUNTIME_SAFETENSORS_H
#define KILN_RUNTIME_SAFETENSORS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::weights {

enum class Dtype { bf16, f16, f32, f64, i64, i32, i16, i8, u8, boolean, f8_e4m3, f8_e5m2, unknown };

// Kiln's name of a dtype: "bf16", "f16", "f32", "f64", "i64", "i32", "i16", "i8", "u8",
// "bool", "f8_e4m3" (safetensors F8_E4M3, torch.float8_e4m3fn), "f8_e5m2"; "unknown".
const char *dtypeName(Dtype);
// Bytes per element; 0 for Dtype::unknown.
size_t dtypeBytes(Dtype);

struct TensorInfo {
  std::string name;          // Hugging Face name
  std::string file;          // absolute or dir-relative path of the .safetensors file holding it
  Dtype dtype = Dtype::unknown;
  std::vector<int64_t> shape;
  uint64_t dataOffset = 0;   // absolute byte offset of the data in the file
  uint64_t bytes = 0;
};

class SafetensorsIndex {
public:
  SafetensorsIndex() = default;
  ~SafetensorsIndex();
  SafetensorsIndex(const SafetensorsIndex &) = delete;
  SafetensorsIndex &operator=(const SafetensorsIndex &) = delete;
  SafetensorsIndex(SafetensorsIndex &&other) noexcept;
  SafetensorsIndex &operator=(SafetensorsIndex &&other) noexcept;

  // `path` is a directory (holding model.safetensors, or model.safetensors.index.json +
  // shards; model.safetensors wins when both are there, as in transformers), one
  // .safetensors file, or a *.index.json file. Returns false and sets `error` (naming
  // the file and what is wrong) on any problem; the index is then empty. Re-opening
  // replaces what was open. Each file stays open (read-only) until the index is
  // destroyed or re-opened.
  bool open(const std::string &path, std::string &error);
  // nullptr if absent.
  const TensorInfo *find(const std::string &name) const;
  // In header order (one file) or weight_map order (sharded; tensors a shard holds but
  // the weight_map does not name are left out).
  const std::vector<TensorInfo> &tensors() const;
  // Reads the tensor's bytes into dst (host memory of exactly info.bytes bytes). `info`
  // must be one of tensors() (or an exact copy). Errors name the tensor and the file
  // (truncated file, read error). Thread-safe: concurrent reads are fine (pread).
  bool read(const TensorInfo &info, void *dst, std::string &error) const;
  // Reads bytes [offset, offset + bytes) of the tensor's data into dst (host memory of
  // `bytes` bytes), with read()'s checks and errors; a range outside the tensor is an
  // error naming it. For reading a large tensor in pieces through a bounded buffer.
  bool readRange(const TensorInfo &info, uint64_t offset, uint64_t bytes, void *dst,
                 std::string &error) const;

private:
  struct File {
    std::string path;
    int fd = -1;
  };
  void close();

  std::vector<TensorInfo> tensors_;
  std::vector<size_t> tensorFile_;  // tensors_[i] lives in files_[tensorFile_[i]]
  std::unordered_map<std::string, size_t> byName_;
  std::vector<File> files_;
};

} // namespace kiln::weights

#endif // KILN_RUNTIME_SAFETENSORS_H

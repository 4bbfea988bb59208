// The activation trace (Runtime.h: kiln_rt_set_trace): every op's output of every step,
// written to files, so a model's numbers can be compared op by op with a reference
// implementation's (test/Parity/trace_compare.py hooks transformers' modules).
#include "Context.h"

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

using namespace kiln::rt;

namespace {

// The trace directory must be new or empty: the trace never overwrites a user's file.
kiln_status_t prepareDirectory(const std::string &dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) {
    if (!std::filesystem::is_directory(dir, ec))
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "kiln_rt_set_trace: '%s' exists and is not a directory", dir.c_str());
    if (!std::filesystem::is_empty(dir, ec))
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "kiln_rt_set_trace: directory '%s' is not empty (the trace would mix "
                  "with or overwrite its files)", dir.c_str());
    return ok();
  }
  if (!std::filesystem::create_directories(dir, ec))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_trace: cannot create '%s': %s",
                dir.c_str(), ec.message().c_str());
  return ok();
}

kiln_status_t writeFile(const Call &c, const std::string &path, const void *data,
                        size_t bytes, const char *mode) {
  FILE *f = std::fopen(path.c_str(), mode);
  if (!f)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "trace: cannot open '%s'", path.c_str());
  const bool written = std::fwrite(data, 1, bytes, f) == bytes;
  if (std::fclose(f) != 0 || !written)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "trace: cannot write '%s'", path.c_str());
  return KILN_OK;
}

} // namespace

kiln_status_t kiln::rt::traceOutput(const Call &c, kiln_rt_context *ctx, const void *out,
                                    int64_t rows, int64_t cols, const char *part) {
  if (ctx->traceDir.empty() || ctx->capturing || ctx->dry)
    return KILN_OK;
  uint64_t bytes = 0;
  if (!product(&bytes, {rows, cols, static_cast<int64_t>(kBf16)}))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "trace: output size overflows");
  std::vector<char> host(bytes);
  if (cudaError_t e = cudaStreamSynchronize(ctx->stream); e != cudaSuccess)
    return noteCudaError(ctx, e, c.cuda(e, "trace: the launch failed"));
  if (cudaError_t e = cudaMemcpy(host.data(), out, bytes, cudaMemcpyDeviceToHost);
      e != cudaSuccess)
    return noteCudaError(ctx, e, c.cuda(e, "trace: copying the output"));
  const std::string suffix = part ? std::string("-") + part : std::string();
  const std::string file = "s" + std::to_string(ctx->generation) + "-o" +
                           std::to_string(ctx->opIndex) + suffix + ".bin";
  if (kiln_status_t s = writeFile(c, ctx->traceDir + "/" + file, host.data(), bytes, "wb");
      s != KILN_OK)
    return s;
  const std::string line = std::to_string(ctx->generation) + "\t" +
                           std::to_string(ctx->opIndex) + "\t" + c.fn +
                           (part ? std::string(":") + part : std::string()) + "\t" +
                           std::to_string(c.layer) + "\t" + std::to_string(rows) + "\t" +
                           std::to_string(cols) + "\t" + file + "\n";
  ++ctx->tracedOps;
  return writeFile(c, ctx->traceDir + "/trace.tsv", line.data(), line.size(), "ab");
}

extern "C" kiln_status_t kiln_rt_set_trace(kiln_rt_context_t *ctx, const char *dir) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_trace: context is null");
  return guarded("kiln_rt_set_trace", [&]() -> kiln_status_t {
    if (!dir || !*dir) {
      ctx->traceDir.clear();
      return ok();
    }
    if (kiln_status_t s = prepareDirectory(dir); s != KILN_OK)
      return s;
    ctx->traceDir = dir;
    return ok();
  });
}

// kiln-run: runs a compiled model (kiln-compile --emit=so) on a batch of token-id
// prompts through the Kiln runtime's serving API (include/kiln/Runtime/Model.h):
// greedy generation, optionally with lossless speculative decoding (n-gram proposals or
// a draft model), teacher-forced checking against reference continuations, memory and
// speed reports. Plain C++ and the runtime; no LLVM. Usage: kiln-run --help.
#include "kiln/Runtime/Model.h"

#include "Ngram.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

const char *kUsage =
    "usage: kiln-run MODEL.so --weights DIR --prompts FILE --max-new-tokens N\n"
    "                [--spec ngram:K | --spec mtp:1 | --draft-model DRAFT.so "
    "--draft-weights DIR --spec draft:K]\n"
    "                [--json OUT.json] [--logits OUT.bin] [--teacher-forced REF.json]\n"
    "                [--device N] [--cuda-graphs N] [--gemm-policy P] [--skinny-gemm F]\n"
    "                [--check-launches]\n"
    "                [--trace DIR] [--nccl-one-rank | --ranks N] [--dry]\n"
    "  --prompts FILE         one prompt per line, token ids separated by spaces (blank\n"
    "                         lines ignored); all prompts run as ONE batch\n"
    "  --max-new-tokens N     greedy tokens to generate per prompt\n"
    "  --spec ngram:K         verify K n-gram (prompt-lookup) proposals per step\n"
    "  --spec draft:K         K proposals of a draft model (--draft-model/--draft-weights)\n"
    "  --spec mtp:1           the model's own MTP module proposes one token a step (a\n"
    "                         DeepSeek model compiled with --spec mtp:1; docs/mtp.md)\n"
    "  --json OUT             results: outputs, tokens/s, acceptance, memory\n"
    "  --logits OUT.bin       float32 [prompts, vocab] logits of the prefill step\n"
    "  --teacher-forced REF   {\"continuations\": [[ids...] per prompt]}: feed the reference\n"
    "                         and count where kiln's argmax agrees with its next token\n"
    "  --device N             CUDA device (default 0)\n"
    "  --cuda-graphs N        capture at most N decode step shapes in CUDA graphs\n"
    "                         (default: the model's, kiln-compile --cuda-graphs; 0: every\n"
    "                         step launches eagerly; always within the plan's reserve)\n"
    "  --gemm-policy P        row-invariant (default: a sequence's bits do not depend on\n"
    "                         the batch; speculation needs it) or heuristic (cuBLASLt's\n"
    "                         fastest algorithm per shape; models without speculation)\n"
    "  --skinny-gemm F        the row-invariant GEMM of the steps: auto (default: tensor\n"
    "                         cores for models of max_batch 1, else cuBLASLt), off\n"
    "                         (cuBLASLt), tensor-cores or cuda-cores (the fastest at one\n"
    "                         row, slower with drafts; a plain and a speculative model\n"
    "                         agree bit for bit only when both run the same one)\n"
    "  --check-launches       wait for every kernel, so a device fault names its op and\n"
    "                         layer (debugging; slow, no CUDA graphs)\n"
    "  --trace DIR            write every op's output of the model's steps to DIR (new or\n"
    "                         empty; DIR/trace.tsv lists them; slow, no CUDA graphs)\n"
    "  --nccl-one-rank        load the target as rank 0 of a one-rank NCCL communicator\n"
    "                         (kiln_model_load_rank): a model's all-reduces then run\n"
    "                         through NCCL, and must give the same bits as without it\n"
    "  --ranks N              a model compiled with --tp N, one rank a GPU: rank r on\n"
    "                         device --device + r, each in a thread of its own, all in\n"
    "                         one NCCL communicator; rank 0 reports, and every rank must\n"
    "                         generate the same tokens\n"
    "  --dry                  validation only (no GPU): one prefill and one decode step\n";

struct Options {
  std::string model, weights, prompts, json, logits, teacherForced, draftModel, draftWeights,
      trace;
  int maxNewTokens = -1;
  int device = 0;
  int cudaGraphs = -1; // the model's (its manifest's cuda_graphs)
  kiln_gemm_policy_t gemmPolicy = KILN_GEMM_ROW_INVARIANT;
  std::optional<kiln_gemm_skinny_t> skinnyGemm; // unset: the runtime's choice (auto)
  bool checkLaunches = false;
  bool ncclOneRank = false;
  int ranks = 0; // --ranks N: N tensor-parallel ranks (0: one model, no communicator)
  bool dry = false;
  enum class Spec { None, Ngram, Draft, Mtp } spec = Spec::None;
  int k = 0;
};

struct Failure {
  std::string message;
};

[[noreturn]] void die(const std::string &message) { throw Failure{message}; }

std::string lastError() { return kiln_last_error(); }

void check(kiln_status_t status, const char *what) {
  if (status != KILN_OK)
    die(std::string(what) + ": " + kiln_status_name(status) + ": " + lastError());
}

int parseInt(const std::string &text, const char *what) {
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end || errno || v < 0 || v > 1000000000)
    die(std::string(what) + ": '" + text + "' is not a non-negative integer");
  return static_cast<int>(v);
}

Options parseOptions(int argc, char **argv) {
  Options o;
  std::string spec;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--weights") {
      o.weights = value();
    } else if (a == "--prompts") {
      o.prompts = value();
    } else if (a == "--max-new-tokens") {
      o.maxNewTokens = parseInt(value(), "--max-new-tokens");
    } else if (a == "--spec") {
      spec = value();
    } else if (a == "--draft-model") {
      o.draftModel = value();
    } else if (a == "--draft-weights") {
      o.draftWeights = value();
    } else if (a == "--json") {
      o.json = value();
    } else if (a == "--logits") {
      o.logits = value();
    } else if (a == "--teacher-forced") {
      o.teacherForced = value();
    } else if (a == "--device") {
      o.device = parseInt(value(), "--device");
    } else if (a == "--cuda-graphs") {
      o.cudaGraphs = parseInt(value(), "--cuda-graphs");
    } else if (a == "--gemm-policy") {
      const std::string policy = value();
      if (policy == "row-invariant")
        o.gemmPolicy = KILN_GEMM_ROW_INVARIANT;
      else if (policy == "heuristic")
        o.gemmPolicy = KILN_GEMM_HEURISTIC;
      else
        die("--gemm-policy " + policy + ": expected row-invariant or heuristic");
    } else if (a == "--skinny-gemm") {
      const std::string form = value();
      if (form == "auto")
        o.skinnyGemm.reset();
      else if (form == "off")
        o.skinnyGemm = KILN_GEMM_SKINNY_OFF;
      else if (form == "tensor-cores")
        o.skinnyGemm = KILN_GEMM_SKINNY_TENSOR_CORES;
      else if (form == "cuda-cores")
        o.skinnyGemm = KILN_GEMM_SKINNY_CUDA_CORES;
      else
        die("--skinny-gemm " + form + ": expected auto, off, tensor-cores or cuda-cores");
    } else if (a == "--check-launches") {
      o.checkLaunches = true;
    } else if (a == "--trace") {
      o.trace = value();
    } else if (a == "--nccl-one-rank") {
      o.ncclOneRank = true;
    } else if (a == "--ranks") {
      o.ranks = parseInt(value(), "--ranks");
      if (o.ranks < 1 || o.ranks > 64)
        die("--ranks " + std::to_string(o.ranks) + ": expected 1 to 64 ranks");
    } else if (a == "--dry") {
      o.dry = true;
    } else if (!a.empty() && a[0] == '-') {
      die("unknown option " + a + "\n" + kUsage);
    } else if (o.model.empty()) {
      o.model = a;
    } else {
      die("unexpected argument " + a + " (one MODEL.so)");
    }
  }
  if (o.model.empty())
    die(std::string("no MODEL.so given\n") + kUsage);
  if (o.prompts.empty())
    die("--prompts FILE is required");
  if (!o.dry && o.weights.empty())
    die("--weights DIR is required (or --dry)");
  if (o.maxNewTokens < 0)
    o.maxNewTokens = o.dry ? 1 : -1;
  if (o.maxNewTokens < 0)
    die("--max-new-tokens N is required");
  if (!spec.empty() && spec != "none") {
    size_t colon = spec.find(':');
    std::string kind = spec.substr(0, colon);
    if (colon == std::string::npos)
      die("--spec " + spec + ": expected ngram:K, draft:K or mtp:1");
    o.k = parseInt(spec.substr(colon + 1), "--spec K");
    if (o.k < 1)
      die("--spec " + spec + ": K must be >= 1");
    if (kind == "ngram")
      o.spec = Options::Spec::Ngram;
    else if (kind == "draft")
      o.spec = Options::Spec::Draft;
    else if (kind == "mtp")
      o.spec = Options::Spec::Mtp;
    else
      die("--spec " + spec + ": unknown kind '" + kind + "' (ngram, draft or mtp)");
    if (o.spec == Options::Spec::Mtp && o.k != 1)
      die("--spec " + spec + ": DeepSeek's MTP module drafts one token a step; use mtp:1");
  }
  if (o.ranks > 0 && o.ncclOneRank)
    die("--ranks N and --nccl-one-rank both name the communicator; --ranks 1 is the "
        "one-rank run");
  if (o.ranks > 1 && !o.trace.empty())
    die("--trace writes one model's ops: trace one rank's model without --ranks");
  if (o.spec == Options::Spec::Draft && (o.draftModel.empty() || (!o.dry && o.draftWeights.empty())))
    die("--spec draft:K needs --draft-model DRAFT.so and --draft-weights DIR");
  if (o.spec != Options::Spec::Draft && !o.draftModel.empty())
    die("--draft-model needs --spec draft:K");
  return o;
}

std::vector<std::vector<int32_t>> readPrompts(const std::string &path, int64_t vocab) {
  std::ifstream in(path);
  if (!in)
    die("--prompts " + path + ": cannot open: " + std::strerror(errno));
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream words(line);
    std::vector<int32_t> prompt;
    std::string word;
    while (words >> word) {
      char *end = nullptr;
      errno = 0;
      long long v = std::strtoll(word.c_str(), &end, 10);
      if (*end || errno || v < 0 || v >= vocab)
        die(path + ":" + std::to_string(number) + ": '" + word +
            "' is not a token id in [0, " + std::to_string(vocab) + ")");
      prompt.push_back(static_cast<int32_t>(v));
    }
    if (!prompt.empty())
      prompts.push_back(std::move(prompt));
  }
  if (prompts.empty())
    die("--prompts " + path + ": no prompts");
  return prompts;
}

// {"continuations": [[ids...], ...]} (other keys ignored).
std::vector<std::vector<int32_t>> readContinuations(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    die("--teacher-forced " + path + ": cannot open: " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  size_t at = text.find("\"continuations\"");
  auto bad = [&](const char *what) {
    die("--teacher-forced " + path + ": " + what + " (expected {\"continuations\": [[ids...], ...]})");
  };
  if (at == std::string::npos)
    bad("no \"continuations\" key");
  at += std::strlen("\"continuations\"");
  auto skip = [&]() {
    while (at < text.size() && std::strchr(" \t\r\n", text[at]))
      ++at;
  };
  auto expect = [&](char c) {
    skip();
    if (at >= text.size() || text[at] != c)
      bad((std::string("expected '") + c + "'").c_str());
    ++at;
  };
  expect(':');
  expect('[');
  std::vector<std::vector<int32_t>> out;
  skip();
  if (at < text.size() && text[at] == ']')
    return out;
  for (;;) {
    expect('[');
    std::vector<int32_t> ids;
    skip();
    if (at < text.size() && text[at] == ']') {
      ++at;
    } else {
      for (;;) {
        skip();
        char *end = nullptr;
        long long v = std::strtoll(text.c_str() + at, &end, 10);
        if (end == text.c_str() + at || v < 0 || v > INT32_MAX)
          bad("a token id is not a non-negative integer");
        ids.push_back(static_cast<int32_t>(v));
        at = static_cast<size_t>(end - text.c_str());
        skip();
        if (at < text.size() && text[at] == ',') {
          ++at;
          continue;
        }
        expect(']');
        break;
      }
    }
    out.push_back(std::move(ids));
    skip();
    if (at < text.size() && text[at] == ',') {
      ++at;
      continue;
    }
    expect(']');
    break;
  }
  return out;
}

// One tensor-parallel rank: which, of how many, in the communicator `id` names.
struct RankSpec {
  int rank = 0, ranks = 1;
  const kiln_rt_nccl_id_t *id = nullptr;
};

// A loaded model and its sequences (one per prompt).
struct Model {
  kiln_model_t *model = nullptr;
  kiln_model_info_t info{};
  std::vector<int32_t> seqs;
  std::string what;

  Model(const std::string &so, const std::string &weights, int device, bool dry,
        int cudaGraphs, bool checkLaunches, const std::string &role,
        const RankSpec *rank = nullptr)
      : what(role) {
    if (dry) {
      check(kiln_model_load_dry(so.c_str(), &model), ("loading the " + role + " (dry)").c_str());
    } else if (rank) {
      check(kiln_model_load_rank(so.c_str(), weights.c_str(), device, rank->rank, rank->ranks,
                                 rank->id, &model),
            ("loading the " + role + " as NCCL rank " + std::to_string(rank->rank) + " of " +
             std::to_string(rank->ranks))
                .c_str());
    } else {
      check(kiln_model_load(so.c_str(), weights.c_str(), device, &model),
            ("loading the " + role).c_str());
    }
    check(kiln_model_get_info(model, &info), "kiln_model_get_info");
    if (cudaGraphs >= 0)
      check(kiln_rt_set_max_graphs(kiln_model_context(model), cudaGraphs),
            "kiln_rt_set_max_graphs");
    check(kiln_rt_set_check_launches(kiln_model_context(model), checkLaunches),
          "kiln_rt_set_check_launches");
  }
  kiln_rt_graph_stats_t graphs() const {
    kiln_rt_graph_stats_t stats{};
    check(kiln_rt_graph_stats(kiln_model_context(model), &stats), "kiln_rt_graph_stats");
    return stats;
  }
  ~Model() { kiln_model_unload(model); }
  Model(const Model &) = delete;
  Model &operator=(const Model &) = delete;

  void addSequences(size_t n) {
    for (int32_t id : seqs)
      kiln_model_remove_sequence(model, id);
    seqs.assign(n, -1);
    for (size_t i = 0; i < n; ++i)
      check(kiln_model_add_sequence(model, &seqs[i]), ("adding a " + what + " sequence").c_str());
  }
  int32_t len(size_t i) const { return kiln_model_seq_len(model, seqs[i]); }
};

// Host time kiln_rt_forward spent per decode step (issuing launches, not waiting), over
// every decode step (first eager steps and captures included).
double hostMicrosPerStep(const kiln_rt_graph_stats_t &stats) {
  return stats.decode_steps ? 1e6 * stats.decode_host_seconds / stats.decode_steps : 0.0;
}

// The steady state of a served decode step that replays a graph: the host time of
// kiln_rt_set_batch (validation, the upload of the step inputs) plus the graph launch.
double hostMicrosPerReplayedStep(const kiln_rt_graph_stats_t &stats) {
  if (!stats.replays || !stats.decode_batches)
    return 0.0;
  return 1e6 * (stats.replay_host_seconds / stats.replays +
                stats.decode_set_batch_seconds / stats.decode_batches);
}

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string jsonArray(const std::vector<int32_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string number(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.6g", v);
  return buffer;
}

struct Results {
  std::vector<std::vector<int32_t>> outputs;
  double prefillSeconds = 0, decodeSeconds = 0;
  int64_t promptTokens = 0, decodeTokens = 0;
  int64_t steps = 0, proposed = 0, accepted = 0;
  bool teacher = false;
  int64_t tfPositions = 0, tfAgree = 0;
  struct Mismatch {
    int prompt, position;
    int32_t token; // kiln's argmax there
  };
  std::vector<Mismatch> tfMismatches;
  // --spec mtp:1: per prompt, every guess the MTP module made, {position p, token}: its
  // greedy guess of the token at p + 2, made at p (the parity test's reference check).
  std::vector<std::vector<std::pair<int32_t, int32_t>>> mtpGuesses;
};

// Largest draft count every active sequence can still take (max_seq_len).
int stepDrafts(const Model &m, const std::vector<size_t> &active, int k) {
  int room = k;
  for (size_t i : active)
    room = std::min<int64_t>(room, m.info.max_seq_len - m.len(i) - 1);
  return std::max(room, 0);
}

void generate(const Options &o, Model &target, Model *draft,
              const std::vector<std::vector<int32_t>> &prompts, Results &r) {
  const size_t n = prompts.size();
  const int N = o.maxNewTokens;
  const int64_t vocab = target.info.vocab_size;
  std::vector<const int32_t *> ptrs(n);
  std::vector<int32_t> lens(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    ptrs[i] = prompts[i].data();
    lens[i] = static_cast<int32_t>(prompts[i].size());
    r.promptTokens += lens[i];
  }
  std::vector<float> logits;
  if (!o.logits.empty())
    logits.resize(n * static_cast<size_t>(vocab));
  target.addSequences(n);
  auto t0 = std::chrono::steady_clock::now();
  check(kiln_model_prefill(target.model, target.seqs.data(), static_cast<int32_t>(n), ptrs.data(),
                           lens.data(), next.data(), logits.empty() ? nullptr : logits.data()),
        "prefill");
  auto t1 = std::chrono::steady_clock::now();
  r.prefillSeconds = seconds(t0, t1);
  if (!o.logits.empty()) {
    std::FILE *f = std::fopen(o.logits.c_str(), "wb");
    if (!f || std::fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size()) {
      if (f)
        std::fclose(f);
      die("--logits " + o.logits + ": cannot write: " + std::strerror(errno));
    }
    std::fclose(f);
  }
  r.outputs.assign(n, {});
  if (N == 0)
    return;
  for (size_t i = 0; i < n; ++i)
    r.outputs[i].push_back(next[i]);
  // MTP: the module's guess of the token after each sequence's last token, refreshed by
  // every step (kiln_model_last_drafts).
  const bool mtp = o.spec == Options::Spec::Mtp;
  std::vector<int32_t> mtpDraft(n, -1);
  if (mtp) {
    check(kiln_model_last_drafts(target.model, mtpDraft.data(), static_cast<int32_t>(n)),
          "MTP drafts of the prefill");
    if (std::find(mtpDraft.begin(), mtpDraft.end(), -1) != mtpDraft.end())
      die("--spec mtp:1: " + o.model + " hands back no MTP drafts (compile it with "
          "--spec mtp:1)");
    r.mtpGuesses.assign(n, {});
    for (size_t i = 0; i < n; ++i)
      r.mtpGuesses[i].push_back({lens[i] - 1, mtpDraft[i]});
  }

  // Draft model: its own sequences, prefilled with the prompts; `pending` holds the
  // tokens it has not seen yet (the last one is the target's last token).
  std::vector<std::vector<int32_t>> pending(n);
  if (draft) {
    draft->addSequences(n);
    std::vector<int32_t> ignored(n);
    check(kiln_model_prefill(draft->model, draft->seqs.data(), static_cast<int32_t>(n),
                             ptrs.data(), lens.data(), ignored.data(), nullptr),
          "draft model prefill");
    for (size_t i = 0; i < n; ++i)
      pending[i] = {next[i]};
  }

  const int K = o.k;
  auto t2 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids, tokens, argmax, drafts;
  for (;;) {
    std::vector<size_t> active;
    for (size_t i = 0; i < n; ++i)
      if (static_cast<int>(r.outputs[i].size()) < N)
        active.push_back(i);
    if (active.empty())
      break;
    for (size_t i : active)
      if (target.len(i) + 1 > target.info.max_seq_len)
        die("prompt " + std::to_string(i) + " reached the target's max_seq_len " +
            std::to_string(target.info.max_seq_len));
    const int32_t m = static_cast<int32_t>(active.size());
    int k = o.spec == Options::Spec::None ? 0 : stepDrafts(target, active, K);
    if (draft && k > 0)
      k = std::min(k, stepDrafts(*draft, active, K + 1));
    const int q = 1 + k;
    ids.resize(m);
    tokens.assign(static_cast<size_t>(m) * q, 0);
    argmax.assign(static_cast<size_t>(m) * q, 0);
    drafts.assign(static_cast<size_t>(m) * std::max(k, 1), 0);
    std::vector<int32_t> targetLen(m), draftLen(m);
    for (int32_t j = 0; j < m; ++j) {
      ids[j] = target.seqs[active[j]];
      targetLen[j] = target.len(active[j]);
      tokens[static_cast<size_t>(j) * q] = r.outputs[active[j]].back();
    }
    if (k > 0 && mtp) {
      for (int32_t j = 0; j < m; ++j)
        drafts[static_cast<size_t>(j)] = mtpDraft[active[j]];
    } else if (k > 0 && o.spec == Options::Spec::Ngram) {
      std::vector<int32_t> history;
      for (int32_t j = 0; j < m; ++j) {
        const size_t i = active[j];
        history = prompts[i];
        history.insert(history.end(), r.outputs[i].begin(), r.outputs[i].end());
        kiln::spec::proposeNgram(history.data(), history.size(), k, &drafts[static_cast<size_t>(j) * k]);
      }
    } else if (k > 0 && draft) {
      // Catch-up + first proposal in one EXTEND step (1 or 2 tokens per sequence), then
      // k - 1 single-token decode steps.
      std::vector<int32_t> dIds(m), dLens(m), dOut(m);
      std::vector<const int32_t *> dPtrs(m);
      for (int32_t j = 0; j < m; ++j) {
        const size_t i = active[j];
        dIds[j] = draft->seqs[i];
        draftLen[j] = draft->len(i);
        dPtrs[j] = pending[i].data();
        dLens[j] = static_cast<int32_t>(pending[i].size());
      }
      check(kiln_model_extend(draft->model, dIds.data(), m, dPtrs.data(), dLens.data(),
                              dOut.data(), nullptr),
            "draft model catch-up (extend)");
      for (int32_t j = 0; j < m; ++j)
        drafts[static_cast<size_t>(j) * k] = dOut[j];
      for (int d = 1; d < k; ++d) {
        std::vector<int32_t> in(m);
        for (int32_t j = 0; j < m; ++j)
          in[j] = drafts[static_cast<size_t>(j) * k + d - 1];
        check(kiln_model_decode(draft->model, dIds.data(), m, in.data(), 1, dOut.data(), nullptr),
              "draft model proposal (decode)");
        for (int32_t j = 0; j < m; ++j)
          drafts[static_cast<size_t>(j) * k + d] = dOut[j];
      }
    }
    for (int32_t j = 0; j < m; ++j)
      for (int d = 0; d < k; ++d)
        tokens[static_cast<size_t>(j) * q + 1 + d] = drafts[static_cast<size_t>(j) * k + d];
    check(kiln_model_decode(target.model, ids.data(), m, tokens.data(), q, argmax.data(), nullptr),
          k > 0 ? "verify step (decode)" : "decode step");
    ++r.steps;
    std::vector<int32_t> stepMtp;
    if (mtp) {
      stepMtp.resize(static_cast<size_t>(m) * q);
      check(kiln_model_last_drafts(target.model, stepMtp.data(), m * q),
            "MTP drafts of the step");
    }
    for (int32_t j = 0; j < m; ++j) {
      const size_t i = active[j];
      const int32_t *row = &argmax[static_cast<size_t>(j) * q];
      const int32_t *proposal = &drafts[static_cast<size_t>(j) * std::max(k, 1)];
      const int a = k > 0 ? kiln::spec::acceptedDrafts(proposal, row, k) : 0;
      r.proposed += k;
      r.accepted += a;
      std::vector<int32_t> fresh(proposal, proposal + a);
      fresh.push_back(row[a]);
      const size_t room = static_cast<size_t>(N) - r.outputs[i].size();
      fresh.resize(std::min(fresh.size(), room));
      r.outputs[i].insert(r.outputs[i].end(), fresh.begin(), fresh.end());
      r.decodeTokens += static_cast<int64_t>(fresh.size());
      // The module ran at every position of the step: at the last accepted one it
      // guessed the token after the bonus token, the next step's draft.
      if (mtp) {
        mtpDraft[i] = stepMtp[static_cast<size_t>(j) * q + a];
        r.mtpGuesses[i].push_back({targetLen[j] + a, mtpDraft[i]});
      }
      if (k > 0) {
        // The cache keeps [last, accepted drafts]; the bonus token is the next "last".
        check(kiln_model_truncate(target.model, ids[j], targetLen[j] + 1 + a),
              "dropping rejected drafts (target)");
        if (draft) {
          const int32_t seen = draftLen[j] + static_cast<int32_t>(pending[i].size());
          check(kiln_model_truncate(draft->model, draft->seqs[i], seen + std::min(a, k - 1)),
                "dropping rejected drafts (draft model)");
          pending[i].clear();
          if (a == k)
            pending[i].push_back(proposal[k - 1]);
          pending[i].push_back(row[a]);
        }
      } else if (draft) {
        pending[i].push_back(row[0]); // the draft model sits out (no room for drafts)
      }
    }
  }
  auto t3 = std::chrono::steady_clock::now();
  r.decodeSeconds = seconds(t2, t3);
}

void teacherForced(Model &target, const std::vector<std::vector<int32_t>> &prompts,
                   const std::vector<std::vector<int32_t>> &refs, Results &r) {
  const size_t n = prompts.size();
  if (refs.size() < n)
    die("--teacher-forced: " + std::to_string(refs.size()) + " continuations for " +
        std::to_string(n) + " prompts");
  r.teacher = true;
  target.addSequences(n);
  std::vector<const int32_t *> ptrs(n);
  std::vector<int32_t> lens(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    ptrs[i] = prompts[i].data();
    lens[i] = static_cast<int32_t>(prompts[i].size());
  }
  check(kiln_model_prefill(target.model, target.seqs.data(), static_cast<int32_t>(n), ptrs.data(),
                           lens.data(), next.data(), nullptr),
        "teacher-forced prefill");
  auto compare = [&](size_t i, size_t pos, int32_t got) {
    ++r.tfPositions;
    if (got == refs[i][pos])
      ++r.tfAgree;
    else
      r.tfMismatches.push_back({static_cast<int>(i), static_cast<int>(pos), got});
  };
  for (size_t i = 0; i < n; ++i)
    if (!refs[i].empty())
      compare(i, 0, next[i]);
  // Position p (>= 1): the argmax after feeding reference token p - 1.
  for (size_t pos = 1;; ++pos) {
    std::vector<size_t> active;
    for (size_t i = 0; i < n; ++i)
      if (refs[i].size() > pos && target.len(i) < target.info.max_seq_len)
        active.push_back(i);
    if (active.empty())
      break;
    std::vector<int32_t> ids, in, out(active.size());
    for (size_t i : active) {
      ids.push_back(target.seqs[i]);
      in.push_back(refs[i][pos - 1]);
    }
    check(kiln_model_decode(target.model, ids.data(), static_cast<int32_t>(ids.size()), in.data(),
                            1, out.data(), nullptr),
          "teacher-forced decode");
    for (size_t j = 0; j < active.size(); ++j)
      compare(active[j], pos, out[j]);
  }
}

void writeJson(const Options &o, const Model &target, const Results &r) {
  std::string s = "{\n";
  s += "  \"model\": \"" + std::string(kiln_model_name(target.model)) + "\",\n";
  s += "  \"outputs\": [";
  for (size_t i = 0; i < r.outputs.size(); ++i)
    s += (i ? ", " : "") + jsonArray(r.outputs[i]);
  s += "],\n";
  const char *spec = o.spec == Options::Spec::Ngram   ? "ngram"
                     : o.spec == Options::Spec::Draft ? "draft"
                     : o.spec == Options::Spec::Mtp   ? "mtp"
                                                      : "none";
  s += "  \"spec\": \"" + std::string(spec) + (o.k ? ":" + std::to_string(o.k) : "") + "\",\n";
  s += "  \"prompt_tokens\": " + std::to_string(r.promptTokens) + ",\n";
  s += "  \"decode_tokens\": " + std::to_string(r.decodeTokens) + ",\n";
  s += "  \"prefill_seconds\": " + number(r.prefillSeconds) + ",\n";
  s += "  \"decode_seconds\": " + number(r.decodeSeconds) + ",\n";
  s += "  \"prefill_tokens_per_s\": " +
       number(r.prefillSeconds > 0 ? r.promptTokens / r.prefillSeconds : 0) + ",\n";
  s += "  \"decode_tokens_per_s\": " +
       number(r.decodeSeconds > 0 ? r.decodeTokens / r.decodeSeconds : 0) + ",\n";
  s += "  \"acceptance_rate\": " +
       (r.proposed ? number(static_cast<double>(r.accepted) / r.proposed) : std::string("null")) +
       ",\n";
  s += "  \"proposed_drafts\": " + std::to_string(r.proposed) + ",\n";
  if (!r.mtpGuesses.empty()) {
    s += "  \"mtp_guesses\": [";
    for (size_t i = 0; i < r.mtpGuesses.size(); ++i) {
      s += i ? ", [" : "[";
      for (size_t g = 0; g < r.mtpGuesses[i].size(); ++g)
        s += (g ? ", [" : "[") + std::to_string(r.mtpGuesses[i][g].first) + ", " +
             std::to_string(r.mtpGuesses[i][g].second) + "]";
      s += "]";
    }
    s += "],\n";
  }
  s += "  \"accepted_drafts\": " + std::to_string(r.accepted) + ",\n";
  s += "  \"mean_tokens_per_step\": " +
       number(r.steps ? static_cast<double>(r.decodeTokens) / r.steps : 0) + ",\n";
  s += "  \"steps\": " + std::to_string(r.steps) + ",\n";
  const kiln_rt_graph_stats_t graphs = target.graphs();
  s += "  \"cuda_graphs\": {\"max\": " + std::to_string(graphs.max_graphs) +
       ", \"captured\": " + std::to_string(graphs.graphs) +
       ", \"shapes_seen\": " + std::to_string(graphs.shapes_seen) +
       ", \"replayed_steps\": " + std::to_string(graphs.replays) +
       ", \"bytes\": " + std::to_string(graphs.graph_bytes) +
       ", \"reserved_bytes\": " + std::to_string(graphs.graph_byte_limit) + "},\n";
  s += std::string("  \"gemm_policy\": \"") +
       (o.gemmPolicy == KILN_GEMM_HEURISTIC ? "heuristic" : "row-invariant") + "\",\n";
  const kiln_gemm_skinny_t skinny = kiln_rt_skinny_gemm(kiln_model_context(target.model));
  s += std::string("  \"skinny_gemm\": \"") +
       (skinny == KILN_GEMM_SKINNY_TENSOR_CORES ? "tensor-cores"
        : skinny == KILN_GEMM_SKINNY_CUDA_CORES ? "cuda-cores"
                                                : "off") +
       "\",\n";
  s += "  \"host_us_per_decode_step\": " + number(hostMicrosPerStep(graphs)) + ",\n";
  s += "  \"host_us_per_replayed_step\": " + number(hostMicrosPerReplayedStep(graphs)) + ",\n";
  s += "  \"host_us_replayed_step_p50\": " + number(graphs.replay_step_us_p50) + ",\n";
  s += "  \"host_us_replayed_step_p99\": " + number(graphs.replay_step_us_p99) + ",\n";
  s += "  \"host_us_per_graph_launch\": " +
       number(graphs.replays ? 1e6 * graphs.graph_launch_seconds / graphs.replays : 0.0) + ",\n";
  s += "  \"host_us_per_set_batch\": " +
       number(graphs.decode_batches ? 1e6 * graphs.decode_set_batch_seconds /
                                          graphs.decode_batches
                                    : 0.0) +
       ",\n";
  if (r.teacher) {
    s += "  \"teacher_forced\": {\"positions\": " + std::to_string(r.tfPositions) +
         ", \"agree\": " + std::to_string(r.tfAgree) + ", \"mismatch_positions\": [";
    for (size_t i = 0; i < r.tfMismatches.size(); ++i)
      s += (i ? ", [" : "[") + std::to_string(r.tfMismatches[i].prompt) + ", " +
           std::to_string(r.tfMismatches[i].position) + "]";
    s += "], \"mismatch_tokens\": [";
    for (size_t i = 0; i < r.tfMismatches.size(); ++i)
      s += (i ? ", " : "") + std::to_string(r.tfMismatches[i].token);
    s += "]},\n";
  }
  s += "  \"planned_device_bytes\": " + std::to_string(kiln_model_planned_bytes(target.model)) +
       ",\n";
  s += "  \"used_device_bytes\": " + std::to_string(kiln_model_device_bytes_used(target.model)) +
       ",\n";
  s += "  \"used_device_bytes_after_run\": " +
       std::to_string(kiln_model_device_bytes_now(target.model)) + ",\n";
  // A tensor-parallel rank's communicator: its plan's reserve, and what NCCL took.
  s += "  \"planned_collective_bytes\": " +
       std::to_string(kiln_model_planned_collective_bytes(target.model)) + ",\n";
  s += "  \"collective_bytes\": " +
       std::to_string(kiln_rt_collective_bytes(kiln_model_context(target.model))) + ",\n";
  s += "  \"dry\": " + std::string(o.dry ? "true" : "false") + "\n}\n";
  std::FILE *f = std::fopen(o.json.c_str(), "w");
  if (!f || std::fputs(s.c_str(), f) < 0) {
    if (f)
      std::fclose(f);
    die("--json " + o.json + ": cannot write: " + std::strerror(errno));
  }
  std::fclose(f);
}

/// What a run leaves for the ranks' comparison: the tokens and the rank's memory.
struct RankOutcome {
  std::vector<std::vector<int32_t>> outputs;
  uint64_t plannedBytes = 0, usedBytes = 0;
};

/// One model's (or one rank's) whole run; `report`: print the results and write --json
/// and --logits (rank 0 of several; the only model otherwise).
RankOutcome runModel(const Options &o, int device, const RankSpec *rank, bool report) {
  std::string role = "model " + o.model;
  if (rank && rank->ranks > 1)
    role += " (rank " + std::to_string(rank->rank) + ")";
  Model target(o.model, o.weights, device, o.dry, o.cudaGraphs, o.checkLaunches, role, rank);
  if (!o.trace.empty())
    check(kiln_rt_set_trace(kiln_model_context(target.model), o.trace.c_str()),
          "--trace");
  check(kiln_rt_set_gemm_policy(kiln_model_context(target.model), o.gemmPolicy),
        "--gemm-policy");
  if (o.skinnyGemm)
    check(kiln_rt_set_skinny_gemm(kiln_model_context(target.model), *o.skinnyGemm),
          "--skinny-gemm");
  std::unique_ptr<Model> draft;
  if (o.spec == Options::Spec::Draft) {
    draft = std::make_unique<Model>(o.draftModel, o.draftWeights, device, o.dry,
                                    o.cudaGraphs, o.checkLaunches,
                                    "draft model " + o.draftModel);
    if (draft->info.vocab_size != target.info.vocab_size)
      die("the draft model's vocab_size " + std::to_string(draft->info.vocab_size) +
          " differs from the target's " + std::to_string(target.info.vocab_size));
  }
  if (o.spec != Options::Spec::None && target.info.max_draft_len < o.k)
    die("--spec " + std::string(o.spec == Options::Spec::Ngram   ? "ngram:"
                                : o.spec == Options::Spec::Mtp ? "mtp:"
                                                               : "draft:") +
        std::to_string(o.k) + " verifies " + std::to_string(o.k) +
        " drafts per step, but " + o.model + " was compiled with max_draft_len " +
        std::to_string(target.info.max_draft_len) + " (compile it for >= " +
        std::to_string(o.k) + " drafts)");
  auto prompts = readPrompts(o.prompts, target.info.vocab_size);
  for (const Model *m : {&target, draft.get()})
    if (m && static_cast<int64_t>(prompts.size()) > m->info.max_batch)
      die(std::to_string(prompts.size()) + " prompts, but " + m->what +
          " was compiled for max_batch " + std::to_string(m->info.max_batch) +
          " (all prompts run as one batch)");
  std::vector<std::vector<int32_t>> refs;
  if (!o.teacherForced.empty())
    refs = readContinuations(o.teacherForced);

  Results r;
  Options g = o;
  if (o.dry)
    g.maxNewTokens = 2; // one prefill and one decode step
  if (!report)
    g.logits.clear(); // rank 0 writes them
  generate(g, target, draft.get(), prompts, r);
  if (!o.teacherForced.empty())
    teacherForced(target, prompts, refs, r);
  RankOutcome outcome{r.outputs, kiln_model_planned_bytes(target.model),
                      kiln_model_device_bytes_used(target.model)};
  if (!report)
    return outcome;

  for (size_t i = 0; i < r.outputs.size(); ++i) {
    std::printf("prompt %zu (%zu tokens):", i, prompts[i].size());
    for (int32_t t : r.outputs[i])
      std::printf(" %d", t);
    std::printf("\n");
  }
  if (o.dry) {
    std::printf("dry run ok: %s validated one prefill (%lld tokens) and %lld decode step(s) "
                "on a validation-only context\n",
                o.model.c_str(), static_cast<long long>(r.promptTokens),
                static_cast<long long>(r.steps));
  } else {
    std::printf("prefill: %lld tokens in %.3f s (%.1f tokens/s)\n",
                static_cast<long long>(r.promptTokens), r.prefillSeconds,
                r.prefillSeconds > 0 ? r.promptTokens / r.prefillSeconds : 0.0);
    std::printf("decode: %lld tokens in %lld steps, %.3f s (%.1f tokens/s)\n",
                static_cast<long long>(r.decodeTokens), static_cast<long long>(r.steps),
                r.decodeSeconds, r.decodeSeconds > 0 ? r.decodeTokens / r.decodeSeconds : 0.0);
  }
  if (r.proposed)
    std::printf("speculation: %lld of %lld drafts accepted (%.1f%%), %.2f tokens per step\n",
                static_cast<long long>(r.accepted), static_cast<long long>(r.proposed),
                100.0 * r.accepted / r.proposed,
                r.steps ? static_cast<double>(r.decodeTokens) / r.steps : 0.0);
  if (r.teacher)
    std::printf("teacher-forced: %lld of %lld positions agree\n",
                static_cast<long long>(r.tfAgree), static_cast<long long>(r.tfPositions));
  const kiln_rt_graph_stats_t graphs = target.graphs();
  std::printf("cuda graphs: %d decode step shape(s) captured of %llu seen, %llu step(s) "
              "replayed, %llu bytes of %llu reserved; host time %.1f us per decode step, "
              "%.1f us per replayed step (set_batch + graph launch; median %.1f, p99 %.1f)\n",
              graphs.graphs, static_cast<unsigned long long>(graphs.shapes_seen),
              static_cast<unsigned long long>(graphs.replays),
              static_cast<unsigned long long>(graphs.graph_bytes),
              static_cast<unsigned long long>(graphs.graph_byte_limit), hostMicrosPerStep(graphs),
              hostMicrosPerReplayedStep(graphs), graphs.replay_step_us_p50,
              graphs.replay_step_us_p99);
  std::printf("device memory: planned %llu bytes, used %llu at load, %llu now\n",
              static_cast<unsigned long long>(kiln_model_planned_bytes(target.model)),
              static_cast<unsigned long long>(kiln_model_device_bytes_used(target.model)),
              static_cast<unsigned long long>(kiln_model_device_bytes_now(target.model)));
  if (!o.json.empty())
    writeJson(o, target, r);
  return outcome;
}

/// --ranks N: one thread a rank, each loading its rank of the model on its own GPU
/// (loading joins the communicator, so the ranks must load at once). A rank that fails
/// ends the process: the others would wait in NCCL for it forever.
int runRanks(const Options &o) {
  kiln_rt_nccl_id_t id{};
  if (!o.dry)
    check(kiln_rt_nccl_unique_id(&id), "kiln_rt_nccl_unique_id");
  std::vector<RankOutcome> outcomes(o.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r)
    threads.emplace_back([&, r] {
      RankSpec rank{r, o.ranks, &id};
      try {
        outcomes[r] = runModel(o, o.device + r, &rank, r == 0);
        return;
      } catch (const Failure &f) {
        std::fprintf(stderr, "kiln-run: error: rank %d: %s\n", r, f.message.c_str());
      } catch (const std::exception &e) {
        std::fprintf(stderr, "kiln-run: error: rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      std::_Exit(1);
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 1; r < o.ranks; ++r)
    if (outcomes[r].outputs != outcomes[0].outputs)
      die("rank " + std::to_string(r) + " generated other tokens than rank 0: the ranks' "
          "logits differ after the all-gather (a collective or a weight shard is wrong)");
  std::printf("ranks: %d, every rank generated rank 0's tokens; device memory per rank "
              "(planned / used at load):",
              o.ranks);
  for (const RankOutcome &outcome : outcomes)
    std::printf(" %llu / %llu", static_cast<unsigned long long>(outcome.plannedBytes),
                static_cast<unsigned long long>(outcome.usedBytes));
  std::printf("\n");
  return 0;
}

int run(int argc, char **argv) {
  Options o = parseOptions(argc, argv);
  if (o.ranks > 0)
    return runRanks(o);
  kiln_rt_nccl_id_t id{};
  RankSpec oneRank{0, 1, &id};
  if (o.ncclOneRank && !o.dry)
    check(kiln_rt_nccl_unique_id(&id), "kiln_rt_nccl_unique_id");
  runModel(o, o.device, o.ncclOneRank ? &oneRank : nullptr, /*report=*/true);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // Kernel modules load at context creation, before the runtime's memory baseline (lazy
  // loading would allocate module memory at first launch, after it).
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  try {
    return run(argc, argv);
  } catch (const Failure &f) {
    std::fprintf(stderr, "kiln-run: error: %s\n", f.message.c_str());
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "kiln-run: error: out of host memory\n");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-run: error: %s\n", e.what());
  }
  return 1;
}

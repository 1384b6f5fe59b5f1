// `meshpool weights load|ls|get|rm`: model weights in the pool
// (<meshpool/weights.h>).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/common.h"
#include "common/json.h"
#include "meshpool/weights.h"
#include "tools/commands.h"
#include "tools/flags.h"

namespace meshpool::tools {
namespace {

constexpr absl::Duration kPlainProgressEvery = absl::Seconds(2);
constexpr int kBarWidth = 30;

std::string Rate(uint64_t bytes, absl::Duration elapsed) {
  double s = absl::ToDoubleSeconds(elapsed);
  if (s <= 0) return "-";
  return absl::StrCat(FormatSize(static_cast<uint64_t>(bytes / s)), "/s");
}

// Renders progress on stderr: a redrawn bar on a terminal, a line every
// kPlainProgressEvery otherwise, and always a last line.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(isatty(STDERR_FILENO) == 1), start_(absl::Now()) {}

  void Update(const LoadProgress& p) {
    absl::Time now = absl::Now();
    bool done = p.bytes_done == p.bytes_total;
    if (done && printed_done_) return;  // the last piece, then the end
    if (!tty_ && !done && now - last_line_ < kPlainProgressEvery) return;
    printed_done_ = done;
    last_line_ = now;
    absl::Duration elapsed = now - start_;
    double frac = p.bytes_total == 0 ? 1.0
                                     : static_cast<double>(p.bytes_done) /
                                           static_cast<double>(p.bytes_total);
    std::string eta = "-";
    if (p.bytes_done > 0 && !done) {
      eta = absl::FormatDuration(absl::Trunc(elapsed * ((1 - frac) / frac),
                                             absl::Seconds(1)));
    }
    int filled = static_cast<int>(frac * kBarWidth);
    std::string line = absl::StrFormat(
        "[%s%s] %5.1f%% %s / %s  %s  files %d/%d  ETA %s",
        std::string(filled, '#'), std::string(kBarWidth - filled, ' '),
        frac * 100, FormatSize(p.bytes_done), FormatSize(p.bytes_total),
        Rate(p.bytes_done, elapsed), p.files_done, p.files_total, eta);
    if (tty_) {
      std::cerr << "\r" << line << "\033[K" << (done ? "\n" : "") << std::flush;
    } else {
      std::cerr << line << "\n";
    }
  }

 private:
  const bool tty_;
  const absl::Time start_;
  absl::Time last_line_ = absl::InfinitePast();
  bool printed_done_ = false;
};

std::string ShapeText(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int Load(int argc, char** argv) {
  Flags flags("meshpool weights load FILE... --model NAME",
              "Loads safetensors files (or one model.safetensors.index.json) "
              "into the pool as model NAME, striped across the nodes.");
  DefineClientFlags(flags);
  flags.Define("model", "", "model name (required)");
  flags.DefineBool("replace", "replace a model of the same name atomically");
  flags.Define("stripe", "0", "stripe size, e.g. 4MiB (0: the default)");
  flags.Define("replicas", "1", "copies of every stripe, on distinct nodes");
  flags.Define("parallel", "4", "file pieces copied at once");
  flags.DefineBool("quiet", "no progress output");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "weights load", 1, 1 << 20, &rc);
  if (!client) return rc;
  LoadOptions options;
  options.replace = flags.GetBool("replace");
  auto stripe = flags.GetSize("stripe");
  auto replicas = flags.GetInt("replicas");
  auto parallel = flags.GetInt("parallel");
  if (!stripe.ok()) return Fail("weights load", stripe.status());
  if (!replicas.ok()) return Fail("weights load", replicas.status());
  if (!parallel.ok()) return Fail("weights load", parallel.status());
  if (flags.Get("model").empty() || *replicas < 1 || *replicas > 8 ||
      *parallel < 1 || *parallel > 64) {
    return Fail("weights load",
                absl::InvalidArgumentError(
                    "--model is required, --replicas must be 1..8 and "
                    "--parallel 1..64"));
  }
  options.region.stripe_bytes = *stripe;
  options.region.replicas = static_cast<uint32_t>(*replicas);
  options.parallel_files = static_cast<int>(*parallel);
  ProgressPrinter printer;
  if (!flags.GetBool("quiet")) {
    options.progress = [&printer](const LoadProgress& p) { printer.Update(p); };
  }
  absl::Time start = absl::Now();
  auto info = LoadSafetensors(*client, flags.Get("model"), flags.positional(),
                              options);
  if (!info.ok()) return Fail("weights load", info.status());
  absl::Duration took = absl::Now() - start;
  std::cout << "loaded model " << info->name << ": " << info->tensors
            << " tensors, " << FormatSize(info->tensor_bytes) << " from "
            << info->files.size() << " file(s) in "
            << absl::FormatDuration(absl::Trunc(took, absl::Milliseconds(1)))
            << " (" << Rate(info->tensor_bytes, took) << ")\n";
  return 0;
}

int ListModelsCommand(Client& client, bool json) {
  auto models = ListModels(client);
  if (!models.ok()) return Fail("weights ls", models.status());
  if (json) {
    std::cout << "[";
    for (size_t i = 0; i < models->size(); ++i) {
      const ModelInfo& m = (*models)[i];
      std::vector<std::string> files;
      for (const auto& f : m.files) files.push_back(JsonQuote(f));
      std::cout << (i ? ",\n " : "") << "{\"model\": " << JsonQuote(m.name)
                << ", \"tensors\": " << m.tensors
                << ", \"bytes\": " << m.tensor_bytes
                << ", \"region\": " << JsonQuote(m.region) << ", \"files\": ["
                << absl::StrJoin(files, ", ")
                << "], \"loaded_unix_ms\": " << absl::ToUnixMillis(m.loaded)
                << ", \"health\": "
                << JsonQuote(RegionHealthName(m.health.state))
                << ", \"repair_bytes_done\": " << m.health.repair_bytes_done
                << ", \"repair_bytes_total\": " << m.health.repair_bytes_total
                << "}";
    }
    std::cout << "]\n";
    return 0;
  }
  if (models->empty()) {
    std::cout << "no models loaded (meshpool weights load FILE... --model "
                 "NAME loads one)\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-32s %8s %10s  %-19s  %s\n", "MODEL",
                               "TENSORS", "SIZE", "LOADED", "HEALTH");
  for (const ModelInfo& m : *models) {
    std::string health = RegionHealthName(m.health.state);
    if (m.health.repair_bytes_total > 0) {
      absl::StrAppend(&health, " (copying ",
                      FormatSize(m.health.repair_bytes_done), " of ",
                      FormatSize(m.health.repair_bytes_total), ")");
    } else if (!m.health.repair_error.empty()) {
      absl::StrAppend(&health, " (", m.health.repair_error, ")");
    }
    std::cout << absl::StrFormat(
        "%-32s %8d %10s  %-19s  %s\n", m.name, m.tensors,
        FormatSize(m.tensor_bytes),
        absl::FormatTime("%Y-%m-%d %H:%M:%S", m.loaded, absl::LocalTimeZone()),
        health);
  }
  return 0;
}

int ListTensorsCommand(Client& client, const std::string& model, bool json) {
  auto store = WeightStore::Open(client, model);
  if (!store.ok()) return Fail("weights ls", store.status());
  const auto& tensors = (*store)->Tensors();
  if (json) {
    std::cout << "[";
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorInfo& t = tensors[i];
      std::cout << (i ? ",\n " : "") << "{\"name\": " << JsonQuote(t.name)
                << ", \"dtype\": \"" << DTypeName(t.dtype)
                << "\", \"shape\": " << ShapeText(t.shape)
                << ", \"region\": " << JsonQuote(t.region)
                << ", \"offset\": " << t.offset << ", \"length\": " << t.length
                << ", \"digest\": \"" << absl::StrFormat("%016x", t.digest)
                << "\"}";
    }
    std::cout << "]\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-48s %-8s %-20s %14s %12s  %s\n", "TENSOR",
                               "DTYPE", "SHAPE", "OFFSET", "LENGTH", "DIGEST");
  for (const TensorInfo& t : tensors) {
    std::cout << absl::StrFormat("%-48s %-8s %-20s %14d %12d  %016x\n", t.name,
                                 DTypeName(t.dtype), ShapeText(t.shape),
                                 t.offset, t.length, t.digest);
  }
  return 0;
}

int Ls(int argc, char** argv) {
  Flags flags("meshpool weights ls [--model NAME] [--json]",
              "Lists loaded models, or one model's tensors.");
  DefineClientFlags(flags);
  flags.Define("model", "", "list this model's tensors");
  flags.DefineBool("json", "print JSON");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "weights ls", 0, 0, &rc);
  if (!client) return rc;
  if (flags.Get("model").empty()) {
    return ListModelsCommand(*client, flags.GetBool("json"));
  }
  return ListTensorsCommand(*client, flags.Get("model"), flags.GetBool("json"));
}

// "B:E" -> rows [B, E).
absl::Status ParseRows(const std::string& text, uint64_t* begin, uint64_t* end) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], begin) ||
      !absl::SimpleAtoi(parts[1], end)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rows takes BEGIN:END (rows [BEGIN, END) of the first dimension), "
        "got '", text, "'"));
  }
  return absl::OkStatus();
}

int Get(int argc, char** argv) {
  Flags flags("meshpool weights get --model NAME --tensor T [-o FILE]",
              "Writes a tensor's raw bytes (or rows of it) to FILE or stdout.");
  DefineClientFlags(flags);
  flags.Define("model", "", "model name (required)");
  flags.Define("tensor", "", "tensor name (required)");
  flags.Define("output", "-", "output file ('-': stdout)");
  flags.Alias("o", "output");
  flags.Define("rows", "", "only rows BEGIN:END of the first dimension");
  flags.DefineBool("verify", "check the bytes against the load-time digests");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "weights get", 0, 0, &rc);
  if (!client) return rc;
  if (flags.Get("model").empty() || flags.Get("tensor").empty()) {
    return Fail("weights get", absl::InvalidArgumentError(
                                   "--model and --tensor are required"));
  }
  auto store = WeightStore::Open(*client, flags.Get("model"));
  if (!store.ok()) return Fail("weights get", store.status());
  auto tensor = (*store)->Find(flags.Get("tensor"));
  if (!tensor.ok()) return Fail("weights get", tensor.status());
  ReadOptions read;
  read.verify = flags.GetBool("verify");
  std::vector<char> buf;
  absl::StatusOr<size_t> n;
  if (flags.Get("rows").empty()) {
    buf.resize((*tensor)->length);
    n = (*store)->ReadTensor((*tensor)->name, absl::MakeSpan(buf), read);
  } else {
    uint64_t begin = 0, end = 0;
    if (absl::Status s = ParseRows(flags.Get("rows"), &begin, &end); !s.ok()) {
      return Fail("weights get", s);
    }
    // Sized only for rows that exist: ReadTensorSlice refuses the others
    // (OutOfRange) instead of this allocating a huge buffer first.
    const bool valid = begin < end && end <= (*tensor)->rows();
    buf.resize(valid ? (end - begin) * (*tensor)->row_bytes() : 0);
    n = (*store)->ReadTensorSlice((*tensor)->name, begin, end,
                                  absl::MakeSpan(buf), read);
  }
  if (!n.ok()) return Fail("weights get", n.status());
  const std::string out = flags.Get("output");
  if (out == "-") {
    std::cout.write(buf.data(), static_cast<std::streamsize>(*n));
    std::cout.flush();
    return std::cout ? 0 : Fail("weights get", absl::InternalError("write to stdout failed"));
  }
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file.write(buf.data(), static_cast<std::streamsize>(*n));
  file.close();
  if (!file) {
    return Fail("weights get",
                absl::PermissionDeniedError(absl::StrCat("cannot write '", out, "'")));
  }
  return 0;
}

int Rm(int argc, char** argv) {
  Flags flags("meshpool weights rm --model NAME",
              "Removes a model (and any interrupted load of it) from the pool.");
  DefineClientFlags(flags);
  flags.Define("model", "", "model name (required)");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "weights rm", 0, 0, &rc);
  if (!client) return rc;
  if (flags.Get("model").empty()) {
    return Fail("weights rm", absl::InvalidArgumentError("--model is required"));
  }
  absl::Status s = RemoveModel(*client, flags.Get("model"));
  if (!s.ok()) return Fail("weights rm", s);
  std::cout << "removed model " << flags.Get("model") << "\n";
  return 0;
}

}  // namespace

int RunWeights(int argc, char** argv) {
  static constexpr const char* kUsage =
      "usage: meshpool weights load|ls|get|rm ... (--help on each)\n"
      "  load FILE... --model NAME [--replace]  load safetensors into the pool\n"
      "  ls [--model NAME] [--json]              list models or tensors\n"
      "  get --model NAME --tensor T [-o FILE]   fetch a tensor's bytes\n"
      "  rm --model NAME                         remove a model\n";
  if (argc < 1) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string sub = argv[0];
  if (sub == "load") return Load(argc - 1, argv + 1);
  if (sub == "ls") return Ls(argc - 1, argv + 1);
  if (sub == "get") return Get(argc - 1, argv + 1);
  if (sub == "rm") return Rm(argc - 1, argv + 1);
  if (sub == "-h" || sub == "--help") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "meshpool weights: unknown subcommand '" << sub << "'\n" << kUsage;
  return 2;
}

}  // namespace meshpool::tools

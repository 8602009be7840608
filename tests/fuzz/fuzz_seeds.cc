// Writes the seed corpora of the harnesses (tests/fuzz/corpus/<harness>/) from the project's own
// writers: safetensors shards and a sliced two-rank checkpoint as the trainer writes them
// (WriteShard + CommitManifest), the embedded default job spec of `ppctl up` and variants of it
// (JSON and text), the planner's rank programs (what `ppctl plan --format=json` prints),
// encoded for executor_fuzzer, and llm.c shard headers as common/llmc_shard.h writes them.
// Usage: fuzz_seeds <corpus folder>.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/up_spec.h"
#include "common/checkpoint.h"
#include "common/file_io.h"
#include "common/llmc_shard.h"
#include "common/proto_io.h"
#include "common/safetensors.h"
#include "coordinator/plan/plan.h"
#include "coordinator/planning.h"
#include "google/protobuf/text_format.h"

namespace {

namespace fs = std::filesystem;
using namespace pp::common;

void Put(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void Die(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "fuzz_seeds: %s\n", std::string(status.message()).c_str());
  std::exit(1);
}

std::vector<float> Ramp(int n, float start) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + 0.25f * i;
  return v;
}

void Safetensors(const fs::path& out) {
  std::vector<Tensor> tensors = {{"wte.weight", {4, 3}, Ramp(12, -1)},
                                 {ExpAvgName("wte.weight"), {4, 3}, Ramp(12, 0)},
                                 {"ln_f.bias", {3}, Ramp(3, 2)},
                                 {"scale", {}, {0.5f}}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    absl::StatusOr<std::string> bytes = SerializeSafetensors(
        tensors, {{"rank", "0"}, {SliceKey("wte.weight"), "0 1 0 4 4 3"}}, dtype);
    Die(bytes.status());
    Put(out / (dtype == DType::kF32 ? "f32.safetensors" : "bf16.safetensors"), *bytes);
  }
  absl::StatusOr<std::string> empty = SerializeSafetensors({{"e", {0, 4}, {}}});
  Die(empty.status());
  Put(out / "empty.safetensors", *empty);
}

// A step folder packed the way checkpoint_fuzzer reads it: flags, manifest, shards.
void PackCheckpoint(const std::string& dir, const pp::v1::CheckpointManifest& manifest, char flags,
                    const fs::path& path) {
  absl::StatusOr<std::string> json = ReadFile(dir + "/" + kManifestFile);
  Die(json.status());
  std::string packed = std::string(1, flags) + *json;
  for (const pp::v1::CheckpointShard& shard : manifest.shards()) {
    absl::StatusOr<std::string> bytes = ReadFile(dir + "/" + shard.file());
    Die(bytes.status());
    absl::StrAppend(&packed, "\n@@shard@@\n", *bytes);
  }
  Put(path, packed);
}

void Checkpoints(const fs::path& out, const fs::path& scratch) {
  // Two tensor-parallel ranks: a column-parallel qkv weight (parts 3) and a row-split weight,
  // plus a whole tensor on rank 0, as worker/model writes them.
  const std::string dir = StepDir(scratch.string(), "job", 3);
  pp::v1::CheckpointManifest manifest;
  manifest.set_job_id("job");
  manifest.set_step(3);
  manifest.mutable_layout()->set_tensor(2);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<Tensor> tensors = {{"h.0.attn.qkv.weight", {3, 2}, Ramp(6, rank)},
                                   {"h.0.mlp.proj.weight", {2, 2}, Ramp(4, -rank)}};
    std::map<std::string, std::string> metadata = {
        {SliceKey("h.0.attn.qkv.weight"), EncodeSlice({0, 3, rank, 1, {6, 2}})},
        {SliceKey("h.0.mlp.proj.weight"), EncodeSlice({1, 1, 2 * rank, 2, {2, 4}})}};
    if (rank == 0) tensors.push_back({"wte.weight", {2, 2}, Ramp(4, 7)});
    absl::StatusOr<pp::v1::CheckpointShard> shard =
        WriteShard(dir, ShardFileName(rank), tensors, metadata);
    Die(shard.status());
    shard->set_rank(rank);
    *manifest.add_shards() = *shard;
  }
  Die(CommitManifest(dir, manifest));
  PackCheckpoint(dir, manifest, 0x07, out / "sliced-synced");
  PackCheckpoint(dir, manifest, 0x00, out / "sliced");
  PackCheckpoint(dir, manifest, 0x0f, out / "sliced-filtered");
}

// `ppctl up`'s embedded default on two workers (client/up_spec.cc), on generated data so the seed
// needs no file.
pp::v1::JobSpec DefaultSpec() {
  pp::v1::JobSpec spec = pp::client::DefaultUpSpec(2);
  spec.mutable_data()->Clear();
  spec.mutable_data()->set_format("generated");
  return spec;
}

void JobSpecs(const fs::path& out) {
  std::vector<std::pair<std::string, pp::v1::JobSpec>> specs;
  specs.emplace_back("default", DefaultSpec());
  pp::v1::JobSpec interleaved = DefaultSpec();
  interleaved.mutable_parallel()->set_schedule("interleaved-1f1b");
  interleaved.mutable_parallel()->set_chunks(2);
  interleaved.mutable_parallel()->set_partition("params");
  specs.emplace_back("interleaved", interleaved);
  pp::v1::JobSpec zbv = DefaultSpec();
  zbv.mutable_parallel()->set_schedule("zb-v");
  zbv.mutable_parallel()->set_chunks(2);
  zbv.mutable_parallel()->set_tensor(2);
  zbv.mutable_parallel()->set_data(2);
  zbv.mutable_parallel()->set_partition("explicit");
  for (int units : {1, 2, 2, 1}) zbv.mutable_parallel()->add_stage_layers(units);
  zbv.mutable_data()->set_format("bytes");
  zbv.mutable_data()->set_path("corpus.txt");
  specs.emplace_back("zb-v", zbv);
  // The default's own schedule carried inline, in torch's compute-only CSV.
  pp::v1::JobSpec carried = DefaultSpec();
  absl::StatusOr<pp::plan::Planned> planned =
      pp::plan::Plan(carried.parallel().schedule(), carried.parallel().pipeline(), 1,
                     carried.train().microbatches(), pp::plan::CostModel{});
  Die(planned.status());
  carried.mutable_parallel()->clear_schedule();
  for (absl::string_view row :
       absl::StrSplit(pp::plan::ToTorchCsv(planned->schedule, pp::plan::CsvForm::kComputeOnly),
                      "\r\n", absl::SkipEmpty())) {
    carried.mutable_parallel()->add_program(std::string(row));
  }
  specs.emplace_back("program", carried);
  // llm.c shards: a glob and a file read as one stream; then a weighted mix with a generated
  // source (the harness puts its own files in place of the paths).
  pp::v1::JobSpec shards = DefaultSpec();
  shards.mutable_data()->set_format("llmc");
  shards.mutable_data()->add_paths("shards/train-*.bin");
  shards.mutable_data()->add_paths("shards/extra.bin");
  specs.emplace_back("shards", shards);
  pp::v1::JobSpec mix = DefaultSpec();
  mix.clear_eval();  // a mix holds nothing out
  mix.mutable_data()->set_format("llmc");
  pp::v1::WeightedData* web = mix.mutable_data()->add_mix();
  web->set_weight(3);
  web->mutable_data()->set_path("web/*.bin");
  pp::v1::WeightedData* text = mix.mutable_data()->add_mix();
  text->set_weight(1);
  text->mutable_data()->set_format("generated");
  text->mutable_data()->set_generated_tokens(8192);
  specs.emplace_back("mix", mix);
  for (const auto& [name, spec] : specs) {
    absl::StatusOr<std::string> json = MessageToJson(spec, /*pretty=*/true);
    Die(json.status());
    Put(out / (name + ".json"), *json);
    std::string text;
    google::protobuf::TextFormat::PrintToString(spec, &text);
    Put(out / (name + ".txt"), text);
  }
}

// llmc_shard_fuzzer's inputs (the file size, 8 bytes little-endian, then the file's first
// bytes): a shard of 1000 tokens as LlmcHeader writes it, the same truncated, llm.c's Llama-3
// kind, and a header cut short.
void LlmcShards(const fs::path& out) {
  auto input = [](uint64_t file_size, const std::string& header) {
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(file_size >> (8 * i)));
    return bytes + header;
  };
  const std::string header = LlmcHeader(1000);
  Put(out / "shard", input(kLlmcHeaderBytes + 2000, header));
  Put(out / "truncated", input(kLlmcHeaderBytes + 1998, header));
  std::string llama3 = header;
  llama3[0] = static_cast<char>(0xA1);  // 20240801 = 0x0134D9A1, 20240520 = 0x0134D888
  llama3[1] = static_cast<char>(0xD9);
  Put(out / "llama3", input(kLlmcHeaderBytes + 4000, llama3));
  Put(out / "short", input(100, header.substr(0, 100)));
}

// One rank's program in executor_fuzzer's encoding.
std::string EncodeProgram(const pp::v1::Schedule& schedule, int rank, int lookahead) {
  auto s8 = [](int v) { return static_cast<char>(static_cast<int8_t>(v)); };
  std::string bytes;
  bytes += s8(schedule.pipeline() - 1);  // world size 1 + b % 8
  bytes += s8(rank);
  bytes += s8(schedule.stage_to_rank_size());
  bytes += s8(schedule.microbatches());
  bytes += s8(lookahead);
  for (int r : schedule.stage_to_rank()) bytes += s8(r);
  for (const pp::v1::Action& a : schedule.ranks(rank).actions()) {
    bytes += s8(a.kind());
    bytes += s8(a.stage());
    bytes += s8(a.microbatch());
    bytes += s8(a.has_peer() ? a.peer() : -128);
  }
  return bytes;
}

void Programs(const fs::path& out) {
  struct Case {
    const char* name;
    int D, V, M, lookahead;
  };
  for (const Case& c :
       {Case{"1f1b", 2, 1, 4, -1}, Case{"gpipe", 3, 1, 3, 2}, Case{"interleaved-1f1b", 2, 2, 4, -1},
        Case{"zb-h1", 2, 1, 4, 1}, Case{"zb-v", 2, 2, 4, -1}}) {
    absl::StatusOr<pp::v1::Schedule> schedule =
        pp::plan::PlanSchedule(c.name, c.D, c.V, c.M, pp::coordinator::PlanningCosts());
    Die(schedule.status());
    for (int rank = 0; rank < c.D; rank += c.D - 1) {
      Put(out / absl::StrCat(c.name, "-rank", rank), EncodeProgram(*schedule, rank, c.lookahead));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds <corpus folder>\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path scratch =
      fs::temp_directory_path() / ("pp-fuzz-seeds-" + std::to_string(getpid()));
  Safetensors(out / "safetensors");
  Checkpoints(out / "checkpoint", scratch);
  JobSpecs(out / "job_spec");
  Programs(out / "executor");
  LlmcShards(out / "llmc_shard");
  fs::remove_all(scratch);
  return 0;
}

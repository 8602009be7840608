// `ppctl plan`: compiles a schedule locally (no server) and prints it as an ASCII timeline, the
// proto3 JSON of pp.v1.Schedule, or a Chrome trace; `--spec` plans a job spec instead and adds
// each rank's memory estimate; `--auto` first picks schedule, V and M, and
// with --mesh_workers also how to split the workers into data x pipeline x tensor parallelism.
#include <algorithm>
#include <iostream>
#include <iterator>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/command.h"
#include "client/plan_packed.h"
#include "client/schedule_json.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/packing.h"
#include "coordinator/plan/plan.h"

ABSL_FLAG(std::string, schedule, "1f1b",
          "gpipe | 1f1b | interleaved-1f1b | zb-h1 | zb-h2 | zb-v | v-half | v-min | dualpipe-v | "
          "forward-only");
ABSL_FLAG(int32_t, stages, 4, "D: pipeline ranks");
ABSL_FLAG(int32_t, chunks, 0,
          "V: model chunks (stages) per rank; 0 = the schedule's own (2 for interleaved-1f1b, "
          "zb-v, v-half, v-min and dualpipe-v, else 1)");
ABSL_FLAG(int32_t, microbatches, 8, "M: microbatches per step");
ABSL_FLAG(std::string, costs, "f=1,b=2",
          "cost model, comma-separated key=value: f forward, b backward (full), i input-grad and "
          "w weight-grad (default b/2 each, or b minus the other), comm latency per message, send "
          "time a send keeps its rank busy, bw "
          "bandwidth in bytes per time unit (0 = infinite), act bytes of one stage-microbatch "
          "activation, scale per-stage multipliers of compute separated by ':' (S of them), rf "
          "the share of F recomputed before each B or I and rd the share of an activation not "
          "held between them (activation recomputation; --spec sets both from the job). Unset "
          "keys: f=1 b=2, the rest 0");
ABSL_FLAG(std::string, format, "ascii",
          "ascii (timeline + simulation) | json (pp.v1.Schedule) | chrome (trace events) | "
          "torch-csv (torch.distributed.pipelining's compute-only CSV) | torch-csv-comms (its "
          "CSV with the send and receive actions)");
ABSL_FLAG(std::string, schedule_file, "",
          "a FILE of torch.distributed.pipelining's schedule CSV (either form): validate and "
          "simulate it instead of generating one; --schedule, --stages, --chunks and "
          "--microbatches are then not used (the file gives D, V, M and the layout)");
ABSL_FLAG(std::string, spec, "",
          "a job spec FILE (proto3 JSON or text): plan its schedule, layout and partition as "
          "ppcoord would and add each rank's estimated peak memory with its breakdown; "
          "--schedule, --stages, --chunks and --microbatches are then not used, and "
          "--format=json prints a pp.v1.PlanJobResponse (schedule, stage_layers, memory). A spec "
          "that packs microbatches (train.tokens_per_microbatch) has its data read here: step "
          "1's microbatch lengths are printed and scale each microbatch's simulated costs");
ABSL_FLAG(bool, auto, false,
          "choose schedule, V and M: simulate every schedule (V=2..--max_chunks for "
          "interleaved-1f1b) for each M in [--min_microbatches, --max_microbatches] and pick the "
          "shortest step whose peak activations fit --memory_budget. Costs are then those of one "
          "microbatch at the smallest M for a rank's whole share of the model: a candidate with M "
          "microbatches and V chunks scales compute and act by (min M / M) / V. --schedule, --chunks "
          "and --microbatches are not used. With --spec: for that job's D, M from its M up, act "
          "from its model (the largest V=1 stage's saved bytes per microbatch) unless --costs "
          "sets it, and with a --memory_budget activation recomputation (selective, full) is "
          "tried too");
ABSL_FLAG(int32_t, min_microbatches, 0, "--auto: smallest M tried; 0 = D");
ABSL_FLAG(int32_t, max_microbatches, 0, "--auto: largest M tried; 0 = 4 * smallest");
ABSL_FLAG(double, memory_budget, 0,
          "--auto: peak activation memory allowed per rank; bytes when --costs sets act, else "
          "microbatches of a rank's share at the smallest M (1F1B holds min(D, M) on rank 0); "
          "0 = unlimited");
ABSL_FLAG(std::string, schedules, "", "--auto: comma-separated schedules to compare; empty = all");
ABSL_FLAG(int32_t, max_chunks, 4, "--auto: largest V tried for interleaved-1f1b");
ABSL_FLAG(int32_t, mesh_workers, 0,
          "--auto: split this many workers into DP x PP x TP as well (0 = plan --stages ranks "
          "only). --costs then holds one SEQUENCE through the WHOLE model on one worker (f, b, "
          "comm, bw, act = its saved activation bytes); --stages and the M range are not used");
ABSL_FLAG(double, memory_per_worker, 0,
          "--mesh_workers: bytes per worker for weights, gradients, AdamW moments and activations; "
          "--spec with parallel.recompute auto: the bytes each worker has, which the chosen mode's "
          "estimate must fit (as ppcoord checks --memory_bytes); 0 = unlimited");
ABSL_FLAG(int32_t, batch, 0, "--mesh_workers: sequences per step over all replicas (required)");
ABSL_FLAG(int32_t, layers, 0, "--mesh_workers: transformer blocks; PP x V must not exceed it");
ABSL_FLAG(int32_t, heads, 0, "--mesh_workers: attention heads; TP must divide it");
ABSL_FLAG(int32_t, max_tensor, 8, "--mesh_workers: largest TP (the workers of one host)");
ABSL_FLAG(double, boundary_bytes, 0,
          "--mesh_workers: bytes of one sequence's (T,C) activation (4*T*C in fp32): a pipeline "
          "message and a TP all-reduce");
ABSL_FLAG(double, weight_bytes, 0,
          "--mesh_workers: bytes of the whole model's fp32 weights (4 x parameters)");

namespace pp::client {
namespace {

absl::StatusOr<double> ParseCost(const std::string& value, absl::string_view item) {
  double out;
  if (absl::SimpleAtod(value, &out)) return out;
  return absl::InvalidArgumentError(
      absl::StrCat("--costs: '", value, "' is not a number (in ", std::string(item), ")"));
}

absl::Status ParseScales(const std::string& value, std::vector<double>& scales) {
  for (absl::string_view part : absl::StrSplit(value, ':')) {
    double scale;
    if (!absl::SimpleAtod(part, &scale)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--costs: scale entry '", std::string(part), "' is not a number"));
    }
    scales.push_back(scale);
  }
  return absl::OkStatus();
}

absl::StatusOr<plan::CostModel> ParseCosts(const std::string& text) {
  plan::CostModel costs;
  const std::pair<const char*, double*> keys[] = {
      {"f", &costs.forward},         {"b", &costs.backward},
      {"i", &costs.backward_input},  {"w", &costs.backward_weight},
      {"comm", &costs.comm_latency}, {"send", &costs.send_overhead},
      {"bw", &costs.comm_bandwidth}, {"act", &costs.activation_bytes},
      {"rf", &costs.recompute_forward}, {"rd", &costs.recompute_dropped}};
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.first == "scale") {
      if (absl::Status s = ParseScales(kv.second, costs.stage_scale); !s.ok()) return s;
      continue;
    }
    const auto key = std::find_if(std::begin(keys), std::end(keys),
                                  [&](const auto& k) { return kv.first == k.first; });
    if (key == std::end(keys)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--costs: unknown key '", kv.first,
          "' (known: f, b, i, w, comm, send, bw, act, rf, rd, scale)"));
    }
    absl::StatusOr<double> value = ParseCost(kv.second, item);
    if (!value.ok()) return value.status();
    *key->second = *value;
  }
  return costs;
}

std::string Summary(const plan::Planned& planned, const plan::CostModel& costs) {
  const prog::Schedule& s = planned.schedule;
  const plan::Simulation& sim = planned.simulation;
  std::string out = absl::StrCat(s.name, ": D=", s.pipeline, " V=", s.chunks, " M=", s.microbatches,
                                 ", stage -> rank ", absl::StrJoin(s.stage_to_rank, " "), "\n");
  absl::StrAppend(&out, "makespan ", sim.makespan,
                  absl::StrFormat(", bubble %.4f", sim.bubble_fraction), " (",
                  plan::kBubbleDefinition, ")\n");
  const bool bytes = costs.activation_bytes > 0;
  absl::StrAppend(&out, "rank  busy  idle  peak live activations", bytes ? " (bytes)" : "", "\n");
  for (size_t r = 0; r < sim.ranks.size(); ++r) {
    const plan::RankStats& rank = sim.ranks[r];
    absl::StrAppend(&out,
                    absl::StrFormat("%4d %5g %5g  %d", r, rank.busy, rank.idle, rank.peak_live));
    if (bytes) absl::StrAppend(&out, absl::StrFormat(" (%g)", rank.peak_bytes));
    out += "\n";
  }
  return out;
}

absl::Status Print(const plan::Planned& planned, const plan::CostModel& costs,
                   const std::string& format) {
  if (format == "torch-csv" || format == "torch-csv-comms") {
    std::cout << plan::ToTorchCsv(planned.schedule, format == "torch-csv"
                                                        ? plan::CsvForm::kComputeOnly
                                                        : plan::CsvForm::kWithComms);
    return absl::OkStatus();
  }
  if (format == "json") {
    return WriteJsonWithPrograms(
        plan::ScheduleToProto(WithoutPrograms(planned.schedule), &planned.simulation),
        planned.schedule, stdout);
  }
  const plan::Timeline timeline =
      plan::TimelineFromSimulation(planned.schedule, planned.simulation);
  if (format == "chrome") {
    std::cout << plan::RenderChrome(timeline, 1000);
    return absl::OkStatus();
  }
  std::cout << Summary(planned, costs) << plan::RenderAscii(timeline);
  return absl::OkStatus();
}

// An auto-planner's comparison is for people: on stdout with --format=ascii, else on stderr so
// that machine formats keep stdout to the chosen schedule alone. FailedPrecondition (the reason)
// when nothing fits.
template <typename AutoPlanT>
absl::Status ShowComparison(const AutoPlanT& chosen, const std::string& description,
                            const std::string& format) {
  (format == "ascii" ? std::cout : std::cerr) << description;
  if (chosen.chosen < 0) return absl::FailedPreconditionError(chosen.reason);
  return absl::OkStatus();
}

// Plans the chosen candidate and prints it, after `ascii_header` with --format=ascii.
absl::Status PlanAndPrint(const std::string& schedule, int D, int V, int M,
                          const plan::CostModel& costs, const std::string& format,
                          const std::string& ascii_header) {
  absl::StatusOr<plan::Planned> planned = plan::Plan(schedule, D, V, M, costs);
  if (!planned.ok()) return planned.status();
  if (format == "ascii") std::cout << ascii_header;
  return Print(*planned, costs, format);
}

// The request --auto's flags make for D ranks, the M range starting at `default_min_m` unless
// given.
plan::AutoPlanRequest AutoRequest(const plan::CostModel& costs, int D, int default_min_m) {
  plan::AutoPlanRequest request;
  request.pipeline = D;
  request.min_microbatches = absl::GetFlag(FLAGS_min_microbatches);
  if (request.min_microbatches == 0) request.min_microbatches = default_min_m;
  request.max_microbatches = absl::GetFlag(FLAGS_max_microbatches);
  if (request.max_microbatches == 0) request.max_microbatches = 4 * request.min_microbatches;
  request.memory_budget = absl::GetFlag(FLAGS_memory_budget);
  request.costs = costs;
  request.max_chunks = absl::GetFlag(FLAGS_max_chunks);
  request.schedules = absl::StrSplit(absl::GetFlag(FLAGS_schedules), ',', absl::SkipEmpty());
  return request;
}

absl::Status RunAuto(const plan::AutoPlanRequest& request, const std::string& format) {
  absl::StatusOr<plan::AutoPlan> chosen = plan::ChooseSchedule(request);
  if (!chosen.ok()) return chosen.status();
  if (absl::Status s = ShowComparison(*chosen, plan::DescribeAutoPlan(*chosen), format); !s.ok()) {
    return s;
  }
  const plan::Candidate& best = chosen->candidates[chosen->chosen];
  return PlanAndPrint(best.schedule, request.pipeline, best.chunks, best.microbatches,
                      plan::CandidateCosts(request, best), format, "\n");
}

absl::Status RunMesh(const plan::CostModel& costs, const std::string& format) {
  if (costs.backward_input != 0 || costs.backward_weight != 0 || !costs.stage_scale.empty()) {
    return absl::InvalidArgumentError(
        "--costs: i, w and scale are not used with --mesh_workers (costs are per sequence)");
  }
  plan::MeshPlanRequest request;
  request.workers = absl::GetFlag(FLAGS_mesh_workers);
  request.memory_per_worker = absl::GetFlag(FLAGS_memory_per_worker);
  request.batch = absl::GetFlag(FLAGS_batch);
  request.n_layers = absl::GetFlag(FLAGS_layers);
  request.n_heads = absl::GetFlag(FLAGS_heads);
  request.max_tensor = absl::GetFlag(FLAGS_max_tensor);
  request.max_chunks = absl::GetFlag(FLAGS_max_chunks);
  request.schedules = absl::StrSplit(absl::GetFlag(FLAGS_schedules), ',', absl::SkipEmpty());
  request.costs.forward = costs.forward;
  request.costs.backward = costs.backward;
  request.costs.activation_bytes = costs.activation_bytes;
  request.costs.comm_latency = costs.comm_latency;
  request.costs.comm_bandwidth = costs.comm_bandwidth;
  request.costs.boundary_bytes = absl::GetFlag(FLAGS_boundary_bytes);
  request.costs.weight_bytes = absl::GetFlag(FLAGS_weight_bytes);
  absl::StatusOr<plan::MeshPlan> chosen = plan::ChooseMesh(request);
  if (!chosen.ok()) return chosen.status();
  if (absl::Status s = ShowComparison(*chosen, plan::DescribeMeshPlan(*chosen), format); !s.ok()) {
    return s;
  }
  const plan::MeshCandidate& best = chosen->candidates[chosen->chosen];
  const plan::CostModel stage_costs = plan::MeshStageCosts(request, best);
  return PlanAndPrint(best.schedule, best.pp, best.chunks, best.microbatches, stage_costs, format,
                      absl::StrCat("\none replica's pipeline (per stage-microbatch: f=",
                                   stage_costs.forward, " b=", stage_costs.backward,
                                   ", act = pipeline message bytes)\n"));
}

absl::StatusOr<pp::v1::JobSpec> LoadValidSpec(const std::string& path) {
  absl::StatusOr<pp::v1::JobSpec> spec = common::LoadJobSpec(path);
  if (!spec.ok()) return spec.status();
  common::ApplyDefaults(&*spec);
  if (absl::Status valid = common::ValidateJobSpec(*spec); !valid.ok()) return valid;
  return spec;
}

absl::StatusOr<std::vector<int>> SpecPartition(const pp::v1::JobSpec& spec, int stages) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  return plan::PartitionUnits(spec.model(), stages, p.partition(),
                              {p.stage_layers().begin(), p.stage_layers().end()},
                              plan::UnitCosts(spec.model()));
}

// recompute "auto" as ppcoord resolves it, against --memory_per_worker bytes (0: any fits).
absl::StatusOr<plan::RecomputeChoice> ChooseRecomputeLocally(const pp::v1::JobSpec& spec,
                                                            const std::vector<int>& units,
                                                            const plan::Planned& planned) {
  const double budget = absl::GetFlag(FLAGS_memory_per_worker);
  const plan::MemoryFits fits = [budget](const std::vector<plan::RankMemory>& memory) {
    for (const plan::RankMemory& r : memory) {
      if (budget > 0 && r.bytes.total > budget) {
        return absl::FailedPreconditionError(
            absl::StrCat("rank ", r.rank, " needs an estimated ", plan::FormatBytes(r.bytes.total),
                         ", more than --memory_per_worker=", budget));
      }
    }
    return absl::OkStatus();
  };
  return plan::ChooseRecompute(spec, units,
                               plan::ScheduleToProto(planned.schedule, &planned.simulation), fits);
}

// --spec: the job's plan as ppcoord makes it (defaults, validation, schedule, partition,
// recomputation) under `costs`, with the memory estimate.
absl::Status RunSpec(const std::string& path, plan::CostModel costs, const std::string& format) {
  absl::StatusOr<pp::v1::JobSpec> spec = LoadValidSpec(path);
  if (!spec.ok()) return spec.status();
  if (common::IsAutoSchedule(spec->parallel())) {
    std::cerr << "parallel.schedule \"auto\": ppcoord chooses the plan after calibrating the "
                 "placed workers (docs/planner.md \"Auto at run time\"); this is the provisional "
                 "plan it admits and places the job with\n";
    spec = plan::ProvisionalSpec(*std::move(spec));
  }
  const pp::v1::ParallelSpec& p = spec->parallel();
  absl::StatusOr<std::vector<int>> units = SpecPartition(*spec, p.pipeline() * p.chunks());
  if (!units.ok()) return units.status();
  pp::v1::PlanJobResponse response;
  absl::StatusOr<std::string> lengths = WeighPackedMicrobatches(*spec, &costs, &response);
  if (!lengths.ok()) return lengths.status();
  if (!lengths->empty()) (format == "ascii" ? std::cout : std::cerr) << *lengths << "\n";
  absl::StatusOr<plan::Planned> planned =
      plan::PlanSpecSchedule(p, spec->train().microbatches(), costs);
  if (!planned.ok()) return planned.status();
  if (p.recompute() == "auto") {
    absl::StatusOr<plan::RecomputeChoice> choice = ChooseRecomputeLocally(*spec, *units, *planned);
    if (!choice.ok()) return choice.status();
    spec->mutable_parallel()->set_recompute(choice->mode);
    response.set_recompute_reason(choice->reason);
  }
  response.set_recompute(p.recompute());
  absl::StatusOr<plan::RecomputeShares> shares = plan::RecomputeSharesOf(*spec, *units);
  if (!shares.ok()) return shares.status();
  if (costs.recompute_forward == 0 && costs.recompute_dropped == 0 && shares->forward > 0) {
    costs.recompute_forward = shares->forward, costs.recompute_dropped = shares->dropped;
    planned = plan::PlanSpecSchedule(p, spec->train().microbatches(), costs);
    if (!planned.ok()) return planned.status();
  }
  *response.mutable_schedule() = plan::ScheduleToProto(planned->schedule, &planned->simulation);
  response.mutable_stage_layers()->Assign(units->begin(), units->end());
  absl::StatusOr<std::vector<plan::RankMemory>> memory =
      plan::EstimateMemory(*spec, *units, response.schedule());
  if (!memory.ok()) return memory.status();
  for (const plan::RankMemory& rank : *memory) *response.add_memory() = plan::MemoryToProto(rank);
  if (format == "json") {
    response.mutable_schedule()->clear_ranks();  // written straight from the plan instead
    return WriteJsonWithPrograms(response, planned->schedule, stdout);
  }
  if (format == "ascii") {
    std::cout << "stage layers " << absl::StrJoin(*units, " ") << "\n";
    if (p.recompute() != "none") {
      std::cout << "recompute " << p.recompute()
                << absl::StrFormat(" (each B or I first runs %.3g x F again; %.1f%% of a "
                                   "microbatch's activations not held)",
                                   shares->forward, 100 * shares->dropped)
                << "\n";
    }
    if (!response.recompute_reason().empty()) std::cout << response.recompute_reason() << "\n";
    std::cout << "memory per rank (estimated peak, bytes as in docs/planner.md \"Memory\")\n"
              << plan::RenderMemoryTable(*memory) << "\n";
  }
  return Print(*planned, costs, format);
}

// --auto --spec of a spec that packs: the lengths of sequences 0..max M - 1, replica 0's
// microbatches of step 1 at every M tried, weigh the candidates (AutoPlanRequest.
// microbatch_weights); their line goes where the comparison goes.
absl::Status WeighPackedCandidates(const pp::v1::JobSpec& spec, const std::string& format,
                                   plan::AutoPlanRequest& request) {
  if (!common::PacksMicrobatches(spec)) return absl::OkStatus();
  absl::StatusOr<std::vector<int64_t>> tokens = FirstStepTokens(spec, request.max_microbatches);
  if (!tokens.ok()) return tokens.status();
  const int64_t budget = spec.train().tokens_per_microbatch();
  request.microbatch_weights = plan::MicrobatchWeights(*tokens, budget);
  (format == "ascii" ? std::cout : std::cerr) << LengthsLine(*tokens, budget) << "\n";
  return absl::OkStatus();
}

// --auto --spec: schedule, V, M and recomputation for the job's D. Costs describe one of the
// spec's microbatches (its microbatch_size) at the smallest M, which defaults to the spec's M;
// act defaults to the bytes such a microbatch leaves saved on the job's largest V=1 stage.
absl::Status RunAutoSpec(const std::string& path, plan::CostModel costs,
                         const std::string& format) {
  absl::StatusOr<pp::v1::JobSpec> spec = LoadValidSpec(path);
  if (!spec.ok()) return spec.status();
  const int D = spec->parallel().pipeline(), M = spec->train().microbatches();
  if (spec->parallel().partition() == "explicit") spec->mutable_parallel()->set_partition("cost");
  absl::StatusOr<std::vector<int>> units = SpecPartition(*spec, D);
  if (!units.ok()) return units.status();
  plan::AutoPlanRequest request = AutoRequest(costs, D, M);
  if (absl::Status s = WeighPackedCandidates(*spec, format, request); !s.ok()) return s;
  for (const char* mode : {"none", "selective", "full"}) {
    spec->mutable_parallel()->set_recompute(mode);
    absl::StatusOr<plan::RecomputeShares> shares = plan::RecomputeSharesOf(*spec, *units);
    if (!shares.ok()) return shares.status();
    if (std::string(mode) != "none") {
      request.recompute.push_back({mode, shares->forward, shares->dropped});
      continue;
    }
    absl::StatusOr<std::vector<int64_t>> held = plan::HeldBytesPerMicrobatch(*spec, *units);
    if (!held.ok()) return held.status();
    if (request.costs.activation_bytes == 0) {
      request.costs.activation_bytes = static_cast<double>(
          *std::max_element(held->begin(), held->end())) * M / request.min_microbatches;
    }
  }
  return RunAuto(request, format);
}

absl::Status RunPlan(const std::vector<std::string>& args) {
  if (!args.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", args[0], "'"));
  }
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "ascii" && format != "json" && format != "chrome" && format != "torch-csv" &&
      format != "torch-csv-comms") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format must be ascii, json, chrome, torch-csv or torch-csv-comms, got '", format, "'"));
  }
  absl::StatusOr<plan::CostModel> costs = ParseCosts(absl::GetFlag(FLAGS_costs));
  if (!costs.ok()) return costs.status();
  const std::string spec = absl::GetFlag(FLAGS_spec);
  if (absl::GetFlag(FLAGS_auto)) {
    if (absl::GetFlag(FLAGS_mesh_workers) > 0) return RunMesh(*costs, format);
    if (!spec.empty()) return RunAutoSpec(spec, *costs, format);
    const int D = absl::GetFlag(FLAGS_stages);
    return RunAuto(AutoRequest(*costs, D, D), format);
  }
  if (!spec.empty()) return RunSpec(spec, *costs, format);
  if (const std::string file = absl::GetFlag(FLAGS_schedule_file); !file.empty()) {
    absl::StatusOr<std::string> text = common::ReadFile(file, uint64_t{64} << 20);
    if (!text.ok()) return text.status();
    absl::StatusOr<plan::Planned> planned = plan::PlanTorchCsv(*text, *costs);
    if (!planned.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", planned.status().message()));
    }
    return Print(*planned, *costs, format);
  }
  absl::StatusOr<plan::Planned> planned =
      plan::Plan(absl::GetFlag(FLAGS_schedule), absl::GetFlag(FLAGS_stages),
                 absl::GetFlag(FLAGS_chunks), absl::GetFlag(FLAGS_microbatches), *costs);
  if (!planned.ok()) return planned.status();
  return Print(*planned, *costs, format);
}

}  // namespace

Command PlanCommand() {
  return {"plan",
          "",
          "compile a pipeline schedule locally (no server): generate, lower comms, validate, "
          "simulate, draw",
          {"schedule", "stages", "chunks", "microbatches", "costs", "format", "schedule_file",
           "spec", "auto",
           "min_microbatches", "max_microbatches", "memory_budget", "schedules", "max_chunks",
           "mesh_workers", "memory_per_worker", "batch", "layers", "heads", "max_tensor",
           "boundary_bytes", "weight_bytes"},
          [](const std::vector<std::string>& args) { return ExitCode("plan", RunPlan(args)); }};
}

}  // namespace pp::client

// Memory model: the bytes each rank of a job holds at its peak, from the spec and the compiled
// plan. Pure: no locks, no RPC, no clock. Safe to call from any thread.
//
// What a CPU worker process holds (fp32, 4 bytes per float and per int32 token), with
// N = microbatch_size x seq_len tokens, C = d_model, Cl = C / TP, NHl = n_heads / TP, Vo = vocab:
// - parameters, gradients, AdamW moments: one buffer each per held tensor (moments: two), so
//   4 x 4 bytes per held parameter. A block holds 12 C Cl + 7 Cl + 6 C parameters (qkv and mlp.fc
//   rows, attn.proj and mlp.proj columns are this TP rank's share; LayerNorms and the two row-
//   parallel biases are whole), the embedding Vo C + T C, the head 2 C (+ Vo C untied).
// - scratch per stage, kept for the job's life: (N,C) and (N,4Cl), plus logits (N,Vo) and
//   losses (N) on the stage with the head. The backend's two operand buffers, once per
//   process, each at the largest of the held stages' products: with train.precision bf16 (N,
//   max(IC,OC)) and (N, IC) floats, in fp32 only a (max(N,OC), IC) one and only for IC a multiple
//   of 1024; such rows take 16 floats more. In bf16 each held weight's converted copy, kept from
//   one optimizer step to the next: 4 bytes per weight-matrix element, twice for those with padded
//   rows (CountOperands in memory.cc).
// - activations: what StageModel keeps per in-flight microbatch. What each unit saves, with its
//   shape, and the order a stage's forward and input-gradient allocate and free it under
//   parallel.recompute is the activation table, common/activations.h, which the worker's model
//   allocates from too (tests/worker/model/activations_test.cc holds the two equal). Here those
//   event lists are walked through this rank's program in order, so the peak is exact for the
//   schedule; W frees what the forward and the input-gradient left.
// - communication: the executor (worker/executor) posts every receive of a step at its start and
//   frees a sent tensor only at the step's end; each boundary tensor is (N,C). Forward outputs
//   and input-gradients are executor buffers too. Data parallel adds the gradient bucket's flat
//   buffer and as much again inside the all-reduce.
// - checkpoint: the shard a rank writes (its values and moments, 12 bytes per written
//   parameter) copied to host tensors and then serialized: twice that, after the last step, when
//   no activation is live. Replicas other than 0 write nothing; TP ranks other than 0 skip the
//   replicated tensors. With data parallelism every replica then digests its state: 3 x 12 bytes
//   per held parameter (host copies, and a string at its last doubling).
// - baseline: kProcessBaselineBytes.
// Peak = baseline + parameters + gradients + moments + scratch + communication buckets +
// max(step peak of activations and boundary buffers, checkpoint copies).
#ifndef PP_COORDINATOR_PLAN_MEMORY_H_
#define PP_COORDINATOR_PLAN_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::plan {

// Fixed per-process bytes: the binary and shared libraries, gRPC threads and channels, the Gloo
// context, and the workspaces this model does not count per tensor (OpenBLAS's packing buffer for
// one thread, which a GEMM touches more of the larger its operands; in fp32 on oneDNN, the weight
// gradient's dout^T in the first operand buffer (kernels/cpu/cpu_products.cc PrepareTransposed, the
// bytes that a transposed-A copy per pool thread took when this was measured); malloc arenas'
// slack). The
// copies of a cache-aliasing B were in the measurement (1 MiB at d_model 256) and are now also
// counted in scratch: a small overstatement.
// Measured with bench/memory (VmHWM in /proc/PID/status minus the rest of this model) on the
// x86-64 Debian build, one BLAS thread: 28 MiB for a d_model 32 job, 45 to 60 MiB (median 52)
// over the d_model 256 layouts; the larger figure is taken, as jobs worth admitting are that
// size or larger.
inline constexpr int64_t kProcessBaselineBytes = int64_t{52} << 20;

struct MemoryBreakdown {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;      // AdamW first and second moments
  int64_t activations = 0;    // saved for backward, at the step's peak
  int64_t communication = 0;  // boundary buffers at the step's peak, data-parallel buckets
  int64_t scratch = 0;        // per-stage workspaces
  int64_t checkpoint = 0;     // host copies while writing a shard (not live with activations)
  int64_t baseline = 0;       // kProcessBaselineBytes
  int64_t total = 0;          // the peak (see the header comment)
};

struct RankMemory {
  int rank = 0;  // global rank, (dp x pipeline + pp) x tensor + tp
  int pp = 0, dp = 0, tp = 0;
  MemoryBreakdown bytes;
};

// The estimate for every global rank, in rank order. REQUIRES: `spec` has its defaults applied
// and is valid (common::ValidateJobSpec), `stage_units` is its partition (S entries) and
// `schedule` its compiled schedule. InvalidArgument when a figure does not fit int64, the
// inputs disagree (a stage or rank outside the plan) or parallel.recompute is "auto" (resolve
// it first: recompute.h).
absl::StatusOr<std::vector<RankMemory>> EstimateMemory(const pp::v1::JobSpec& spec,
                                                       const std::vector<int>& stage_units,
                                                       const pp::v1::Schedule& schedule);

// The bytes one microbatch's forward leaves saved on each stage until its backward, under
// spec.parallel.recompute (none, selective or full), for TP rank 0's share. Same REQUIRES and
// errors as EstimateMemory, without the schedule.
absl::StatusOr<std::vector<int64_t>> HeldBytesPerMicrobatch(const pp::v1::JobSpec& spec,
                                                            const std::vector<int>& stage_units);

// The estimate as its proto (PlanJobResponse.memory).
pp::v1::RankMemory MemoryToProto(const RankMemory& memory);

// A table of `ranks`, one line each: the breakdown and the total, in FormatBytes units.
std::string RenderMemoryTable(const std::vector<RankMemory>& ranks);

// "1.50 GiB", "12.0 MiB", "640 KiB", "512 B": a byte count for people.
std::string FormatBytes(int64_t bytes);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_MEMORY_H_

// libFuzzer harness: worker/executor/executor.h Executor::Create with a random rank program and
// layout and, when Create accepts it, one RunStep against an in-process fake compute and
// transport (receives complete at once: a boundary header states the shape the fake compute gives
// the message's edge, a payload is zeros; sends complete at once), so that the executor's buffer
// bookkeeping runs on programs no planner would emit. The fake compute reads every input and
// writes every output in full: a freed or short buffer is an ASan report.
//
// Input (bytes, signed where noted): world size (1 + b % 8), rank (int8), stages S (b % 17),
// microbatches (int8), recv_lookahead (int8), S x stage_to_rank (int8), then 4 bytes per action:
// kind (int8), stage (int8), microbatch (int8), peer (int8; -128: none). fuzz_seeds encodes the
// planner's real programs (PlanSchedule) this way.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/executor/boundary_message.h"
#include "worker/executor/executor.h"

namespace {

using namespace pp::executor;

constexpr size_t kFloats = 5;
constexpr size_t kMaxActions = 512;

class FakeCompute : public StageCompute {
 public:
  explicit FakeCompute(int num_stages) : num_stages_(num_stages) {}
  size_t InputSize(int stage) const override { return kFloats + stage % 3; }
  size_t OutputSize(int stage) const override { return InputSize(stage + 1); }
  // Boundary buffers are tracked: freeing one that is not live aborts, and after a good step none
  // may be left. After a failed step the executor leaks, by contract, the buffers of transfers in
  // flight (the transport may still write them); ~FakeCompute frees those for LeakSanitizer.
  float* AllocBuffer(size_t n) override {
    float* buffer = new float[n]();
    live_buffers_.insert(buffer);
    return buffer;
  }
  void FreeBuffer(float* buffer) override {
    if (live_buffers_.erase(buffer) != 1) std::abort();
    delete[] buffer;
  }
  size_t LiveBuffers() const { return live_buffers_.size(); }
  ~FakeCompute() override {
    for (float* buffer : live_buffers_) delete[] buffer;
  }
  absl::Status BeginStep(int step) override { return absl::OkStatus(); }
  absl::Status BeginEval(int batch) override { return absl::OkStatus(); }
  absl::StatusOr<double> Evaluate(int stage, int mb, const float* in, float* out) override {
    double sum = Read(in, stage > 0 ? InputSize(stage) : 0);
    Write(out, stage + 1 < num_stages_ ? OutputSize(stage) : 0);
    return sum;
  }
  absl::StatusOr<double> Forward(int stage, int mb, const float* in, float* out) override {
    double sum = Read(in, stage > 0 ? InputSize(stage) : 0);
    Write(out, stage + 1 < num_stages_ ? OutputSize(stage) : 0);
    ++live_;
    return sum;
  }
  absl::Status Backward(int stage, int mb, const float* grad_out, float* grad_in) override {
    Read(grad_out, stage + 1 < num_stages_ ? OutputSize(stage) : 0);
    Write(grad_in, stage > 0 ? InputSize(stage) : 0);
    if (live_ > 0) --live_;
    return absl::OkStatus();
  }
  absl::Status BackwardInput(int stage, int mb, const float* grad_out, float* grad_in) override {
    return Backward(stage, mb, grad_out, grad_in);
  }
  absl::Status BackwardWeight(int stage, int mb) override { return absl::OkStatus(); }
  std::vector<TensorSumSq> GradSumSquares() override { return {{"w", 1.0}}; }
  absl::StatusOr<GradientClip> Clip(const std::vector<TensorSumSq>& all) override {
    return GradientClip{1.0f, 1.0};
  }
  absl::Status OptimizerStep(int step, float clip_scale) override { return absl::OkStatus(); }
  int64_t LiveActivationBytes() const override { return live_ * 4; }

 private:
  static double Read(const float* p, size_t n) {
    if (n > 0 && p == nullptr) std::abort();
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += p[i];
    return sum;
  }
  static void Write(float* p, size_t n) {
    if (n > 0 && p == nullptr) std::abort();
    for (size_t i = 0; i < n; ++i) p[i] = 1.0f;
  }
  int num_stages_;
  int64_t live_ = 0;
  std::set<float*> live_buffers_;
};

class FakeTransport : public pp::comm::Transport {
 public:
  FakeTransport(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<pp::comm::Handle> Isend(int peer, int /*channel*/, uint64_t /*tag*/,
                                         const float* data, size_t n) override {
    if (peer < 0 || peer >= size_) return absl::InvalidArgumentError("bad peer");
    volatile float sink = 0;
    for (size_t i = 0; i < n; ++i) sink = sink + data[i];
    return Open();
  }
  absl::StatusOr<pp::comm::Handle> Irecv(int peer, int /*channel*/, uint64_t tag, float* data,
                                         size_t n) override {
    if (peer < 0 || peer >= size_) return absl::InvalidArgumentError("bad peer");
    std::memset(data, 0, n * sizeof(float));
    if (n == kHeaderFloats) {
      // Edge lo -> lo+1 (program/message.cc's tag layout: lo in bits 27..53) carries
      // FakeCompute::InputSize(lo + 1) floats.
      const int lo = static_cast<int>((tag >> 27) & ((uint64_t{1} << 27) - 1));
      const int64_t width = static_cast<int64_t>(kFloats) + (lo + 1) % 3;
      EncodeHeader({tag, {1, 1, width}}, data);
    }
    return Open();
  }
  absl::Status Wait(pp::comm::Handle handle) override {
    if (open_.erase(handle) != 1) return absl::InvalidArgumentError("unknown handle");
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) override {
    return std::vector<std::string>(size_, mine);
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  absl::Status AllReduceSum(float* data, size_t n) override { return absl::OkStatus(); }
  void Abort() override {}

 private:
  pp::comm::Handle Open() {
    open_.insert({next_, true});
    return next_++;
  }
  int rank_, size_;
  pp::comm::Handle next_ = 1;
  std::map<pp::comm::Handle, bool> open_;
};

struct Reader {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool more() const { return at < size; }
  uint8_t u8() { return at < size ? data[at++] : 0; }
  int s8() { return static_cast<int8_t>(u8()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  const int world = 1 + in.u8() % 8;
  ExecutorOptions options;
  options.rank = in.s8();
  const int S = in.u8() % 17;
  options.microbatches = in.s8();
  options.recv_lookahead = in.s8();
  for (int s = 0; s < S; ++s) options.stage_to_rank.push_back(in.s8());
  pp::v1::RankProgram program;
  program.set_rank(options.rank);
  while (in.more() && static_cast<size_t>(program.actions_size()) < kMaxActions) {
    pp::v1::Action* action = program.add_actions();
    action->set_kind(static_cast<pp::v1::ActionKind>(in.s8()));
    action->set_stage(in.s8());
    action->set_microbatch(in.s8());
    const int peer = in.s8();
    if (peer != -128) action->set_peer(peer);
  }
  FakeCompute compute(S);
  FakeTransport transport(options.rank, world);
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::Create(options, program, &compute, &transport);
  if (!executor.ok() && std::getenv("PP_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "create: %s\n", executor.status().ToString().c_str());
  }
  if (!executor.ok()) return 0;
  absl::StatusOr<StepResult> step = (*executor)->RunStep(0);
  if (std::getenv("PP_FUZZ_VERBOSE") != nullptr) {  // seeds: how far does this input get?
    std::fprintf(stderr, "step: %s\n", step.status().ToString().c_str());
  }
  if (!step.ok()) return 0;
  if (compute.LiveBuffers() != 0) std::abort();  // a good step returns every boundary buffer
  step = (*executor)->RunStep(1);                // reuse after a good step
  if (step.ok() && compute.LiveBuffers() != 0) std::abort();
  return 0;
}

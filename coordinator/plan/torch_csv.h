// Schedules in and out as torch.distributed.pipelining's CSV, so that a schedule designed or
// dumped there runs here and back. The format, as torch/distributed/pipelining/schedules.py
// writes and reads it (matched against pytorch main at commit 00722e648b74, which has
// ScheduleDualPipeV; the tokens are those of _Action.__repr__ / _Action.from_str and
// _action_regex):
//   - one row per rank, rank r on line r+1; one cell per action, in execution order; rows end
//     "\r\n" as Python's csv.writer writes them (a reader accepts "\n" too). An empty cell is an
//     idle time step (torch writes None as ""): skipped.
//   - a cell is "{stage}{kind}{microbatch}" with kind F, B (full backward), I (input gradient),
//     W (weight gradient), SEND_F, RECV_F, SEND_B, RECV_B: "0F0", "1B2", "2I0", "2W0",
//     "1RECV_F0", "0SEND_B3". A comm action names the stage on its own rank, as the IR does
//     (torch's _add_send_recv: the sender's stage, the receiver's stage +-1).
//   - "({a};{b})OVERLAP_F_B" runs a and b back to back (DualPipeV's F&B, see program/dualpipe_v.h).
//   - UNSHARD, RESHARD (FSDP) and REDUCE_GRAD (torch's DP gradient reduction) are read and
//     skipped: workers here hold whole stages and reduce gradients in their own buckets.
// Two forms, as torch's _load_csv(format=...): "compute_only" (F, B, I, W; ReadTorchCsv lowers
// it with program/lower.h, as torch's _add_send_recv does) and "compute_comms" (every send and
// receive spelled out; taken as written). A file with any comm cell is the second form. The layout
// comes from the file: D rows, S = 1 + the largest stage, V = S / D, stage s on the row whose
// computes name it; M = 1 + the largest microbatch. Pure functions; thread-safe.
#ifndef PP_COORDINATOR_PLAN_TORCH_CSV_H_
#define PP_COORDINATOR_PLAN_TORCH_CSV_H_

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/plan/compile.h"
#include "coordinator/plan/simulate.h"
#include "program/ir.h"
#include "program/schedules.h"

namespace pp::plan {

enum class CsvForm { kComputeOnly, kWithComms };

// `schedule` (lowered or not) as torch's CSV; kComputeOnly leaves out the comm actions.
std::string ToTorchCsv(const prog::Schedule& schedule, CsvForm form);

// The name a schedule read from a file carries.
using prog::kScheduleFileName;

// Reads `text` (either form), lowers a compute-only file, validates and simulates it under
// `costs`. InvalidArgument on the first bad cell or the first action the validator refuses,
// prefixed with where it is: "line 2, column 5 ('1F0'): rank 1, action 4 (...): why" (a
// figure about a whole stage names its rank's line only). Bounded: at most 64 MiB of text and
// the planner's D*V*M limit, checked before anything is allocated per stage or microbatch.
absl::StatusOr<Planned> PlanTorchCsv(const std::string& text, const CostModel& costs);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_TORCH_CSV_H_

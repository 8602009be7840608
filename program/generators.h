// Private to program/: the closed-form generators of the schedule table (schedules.h); the
// list-scheduled ones are in list_schedule.h, DualPipe-V in dualpipe_v.h. Each returns the
// compute-only programs. REQUIRES: D, M >= 1 and V, M that pass the row's rules.
#ifndef PP_PROGRAM_GENERATORS_H_
#define PP_PROGRAM_GENERATORS_H_

#include "program/ir.h"

namespace pp::prog::internal {

Schedule GPipe(int D, int M);
// Narayanan et al. 2021 (PipeDream-Flush as used by Megatron-LM).
Schedule OneFOneB(int D, int M);
// Megatron-LM's interleaved schedule with microbatch groups of D.
Schedule Interleaved(int D, int V, int M);
// Qi et al. 2023, figure 3.
Schedule ZbH1(int D, int M);

}  // namespace pp::prog::internal

#endif  // PP_PROGRAM_GENERATORS_H_

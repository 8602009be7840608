// Private to the planner: DualPipeV, DeepSeek's "cut-in-half" DualPipe (DeepSeek-V3 technical
// report, sec. 3.2.1; the DualPipe repository's dualpipev.py describes the V variant): the V
// placement of zb-v (rank r holds stages r and 2D-1-r, the loss on rank 0), with both chunks'
// microbatches streaming in, and in its steady state each rank running a forward of one chunk
// overlapped with a backward of the other.
//
// The IR form of an overlapped "F&B": two actions, F of one chunk and then B of the other, run
// back to back. The alternative, a paired action kind, would need a new proto kind, a new
// executor method, a cost rule in the simulator and a new validator case for something the
// worker cannot overlap anyway (one CPU thread runs one stage's compute at a time; a GPU would
// need a second stream). Two plain actions keep every pass and the worker unchanged; the
// executor already sends F's output in the background and has B's gradient receive posted, so
// the communication of the pair overlaps the other's compute as DualPipe intends. The
// simulator counts them as F + B, not as the overlapped max: its figures are an upper bound of
// the overlapped step.
//
// Rank r's program, in DualPipe's eight phases (chunk 0 is stage r, chunk 1 stage 2D-1-r; each
// chunk runs its microbatches in order; "I" queues a W, "W" runs the oldest queued):
//   1. 2(D-1-r) forwards of chunk 0
//   2. r+1 times: F chunk 0, F chunk 1
//   3. D-1-r times: I chunk 1, W, F chunk 1                        (zero-bubble warm-up)
//   4. M-2D+r+1 times: F chunk 0 & B chunk 1, F chunk 1 & B chunk 0 (the overlapped steady state)
//   5. D-1-r times: B chunk 1, F chunk 1 & B chunk 0
//   6. r+1 times: B chunk 1, B chunk 0; the second half of them split into I (W queued),
//      from chunk 1 on odd ranks and from chunk 0 on even ones
//   7. D-1-r times: W, I chunk 0
//   8. r+1 times: W
// Each chunk gets M forwards and M backwards; it needs M >= 2D (phase 4 runs at least once on
// rank 0). With f = 1, b = 2 (I = W = 1) it reaches the bound 6M + D - 1, and every rank holds at
// most 2D + 1 chunk activations (DeepSeek's table: PP + 1 stages' worth, 1F1B holds PP).
// Pure; thread-safe.
#ifndef PP_PROGRAM_DUALPIPE_V_H_
#define PP_PROGRAM_DUALPIPE_V_H_

#include "program/ir.h"

namespace pp::prog::internal {

// REQUIRES: D >= 1, M >= 2D (its row in schedules.cc refuses less).
Schedule DualPipeV(int D, int M);

}  // namespace pp::prog::internal

#endif  // PP_PROGRAM_DUALPIPE_V_H_

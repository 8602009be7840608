// The jobs the chaos and load runs train, and the check of a finished one against an
// uninterrupted run of its spec.
// Contract: Reference runs the single-process trainer, which the CPU runtime matches bit for bit on
// pipeline layouts (tests/support/fixture.h, Match::kBitwise); it is computed once per spec.
// Not thread-safe.
#ifndef PP_BENCH_CHAOS_JOBS_H_
#define PP_BENCH_CHAOS_JOBS_H_

#include <cstdint>
#include <string>

#include "bench/chaos/report.h"
#include "pp/v1/job.pb.h"

namespace pp::chaos {

// A 2-stage GPT small enough for 2 cores, with steps of tens of ms and a checkpoint every
// `checkpoint_every` steps; `seed` makes each job's weights its own.
pp::v1::JobSpec TrainSpec(const std::string& corpus, uint64_t seed, int steps,
                          int checkpoint_every);

// Writes a generated corpus of `bytes` to `path`.
void WriteCorpus(const std::string& path, int64_t bytes);

// Whether the final checkpoint (step spec.train.steps under `checkpoint_root`) of `job_id` holds
// the reference trainer's weights for `spec`, bit for bit; `detail` says why not.
bool FinalWeightsBitwise(const std::string& checkpoint_root, const std::string& job_id,
                         const pp::v1::JobSpec& spec, std::string* detail);

}  // namespace pp::chaos

#endif  // PP_BENCH_CHAOS_JOBS_H_

#include "coordinator/elastic.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace pp::coordinator {
namespace {

constexpr absl::Duration kDefaultGrace = absl::Seconds(30);
constexpr absl::Duration kDefaultGrowAfter = absl::Seconds(60);
// The planner tries candidates in order and the first usually plans: a few are enough, and a
// cluster of thousands of workers does not make thousands of spec copies.
constexpr size_t kMaxLayouts = 16;

int OneIfZero(int n) { return n == 0 ? 1 : n; }

absl::Duration SecondsOr(double seconds, absl::Duration fallback) {
  return seconds > 0 ? absl::Seconds(seconds) : fallback;
}

// `base` on `pipeline` stages x `data` replicas, the global batch kept.
pp::v1::JobSpec Relayout(const pp::v1::JobSpec& base, int pipeline, int data, int64_t global) {
  pp::v1::JobSpec spec = base;
  pp::v1::ParallelSpec& parallel = *spec.mutable_parallel();
  if (pipeline != OneIfZero(base.parallel().pipeline())) {
    parallel.clear_stage_layers();  // an explicit partition is one of the base's depth
    if (parallel.partition() == "explicit") parallel.clear_partition();
  }
  parallel.set_pipeline(pipeline);
  parallel.set_data(data);
  spec.mutable_train()->set_microbatches(static_cast<int>(global / data));
  return spec;
}

}  // namespace

bool IsElastic(const pp::v1::JobSpec& spec) { return spec.has_elastic(); }

int LayoutWorkers(const pp::v1::ParallelSpec& parallel) {
  return OneIfZero(parallel.pipeline()) * OneIfZero(parallel.data()) * OneIfZero(parallel.tensor());
}

pp::v1::JobSpec BaseSpec(const pp::v1::Job& job) {
  pp::v1::JobSpec spec = job.spec();
  if (job.has_base_parallel()) {
    *spec.mutable_parallel() = job.base_parallel();
    spec.mutable_train()->set_microbatches(job.base_microbatches());
  }
  return spec;
}

ElasticBounds BoundsOf(const pp::v1::JobSpec& base) {
  const pp::v1::ElasticSpec& e = base.elastic();
  const int layout = LayoutWorkers(base.parallel());
  return ElasticBounds{
      .min_workers = std::max(1, e.min_workers()),
      .max_workers = e.max_workers() > 0 ? e.max_workers() : layout,
      .grace = SecondsOr(e.grace_seconds(), kDefaultGrace),
      .grow_after = SecondsOr(e.grow_after_seconds(), kDefaultGrowAfter),
  };
}

std::vector<pp::v1::JobSpec> LayoutsFor(const pp::v1::JobSpec& base, int workers) {
  const int tensor = OneIfZero(base.parallel().tensor());
  const int base_pipeline = OneIfZero(base.parallel().pipeline());
  const int64_t global =
      static_cast<int64_t>(base.train().microbatches()) * OneIfZero(base.parallel().data());
  const int units = base.model().n_layers() + 2;
  struct Candidate {
    int used, pipeline, data;
  };
  std::vector<Candidate> candidates;
  for (int data = 1; data * tensor <= workers && data <= global; ++data) {
    if (global % data != 0) continue;
    // No deeper than one partition unit (block, embedding, head) per stage.
    for (int pipeline = 1; pipeline * data * tensor <= workers && pipeline <= units; ++pipeline) {
      candidates.push_back({pipeline * data * tensor, pipeline, data});
    }
  }
  const int base_data = OneIfZero(base.parallel().data());
  auto rank = [base_pipeline, base_data](const Candidate& c) {
    return std::make_tuple(c.data != base_data, -c.used, std::abs(c.pipeline - base_pipeline),
                           -c.data);
  };
  std::sort(candidates.begin(), candidates.end(),
            [&rank](const Candidate& a, const Candidate& b) { return rank(a) < rank(b); });
  std::vector<pp::v1::JobSpec> layouts;
  for (const Candidate& c : candidates) {
    if (layouts.size() >= kMaxLayouts) break;
    layouts.push_back(Relayout(base, c.pipeline, c.data, global));
    const pp::v1::ParallelSpec& p = layouts.back().parallel();
    if (p.schedule() != "1f1b" && !common::IsAutoSchedule(p)) {
      pp::v1::JobSpec fallback = layouts.back();
      fallback.mutable_parallel()->set_schedule("1f1b");
      fallback.mutable_parallel()->set_chunks(1);
      fallback.mutable_parallel()->clear_stage_layers();
      if (fallback.parallel().partition() == "explicit") {
        fallback.mutable_parallel()->clear_partition();
      }
      layouts.push_back(std::move(fallback));
    }
  }
  return layouts;
}

std::string LayoutLabel(const pp::v1::JobSpec& spec) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  return absl::StrCat(common::ScheduleLabel(p), " D=", OneIfZero(p.pipeline()),
                      " V=", OneIfZero(p.chunks()), " T=", OneIfZero(p.tensor()),
                      " R=", OneIfZero(p.data()), " M=", spec.train().microbatches(), " (",
                      LayoutWorkers(p), " workers)");
}

}  // namespace pp::coordinator

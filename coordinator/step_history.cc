// JobManager: a job's recorded steps in pages (ListJobSteps; docs/jobs.md "Step history"). The
// records are the committer's rows of table steps (store.h, kMaxStepRecords), read under
// store_mu_ alone: a step shows once the committer's round after it wrote it.
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/jobs.h"

namespace pp::coordinator {
namespace {

constexpr int kDefaultStepsPage = 1000;
constexpr int kMaxStepsPage = 10000;
// A page token names the step the next page starts at; opaque to clients (AIP-158).
constexpr char kStepTokenPrefix[] = "step-";

// The step a request's first page or its token starts at; InvalidArgument naming the field.
absl::StatusOr<int> FirstStep(const pp::v1::ListJobStepsRequest& request) {
  if (request.page_token().empty()) {
    if (request.from_step() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("from_step: must be >= 0, got ", request.from_step()));
    }
    return request.from_step();
  }
  absl::string_view token = request.page_token();
  int step = 0;
  if (!absl::ConsumePrefix(&token, kStepTokenPrefix) || !absl::SimpleAtoi(token, &step) ||
      step < 0) {
    return absl::InvalidArgumentError("page_token: not a token ListJobSteps handed out");
  }
  return step;
}

}  // namespace

absl::StatusOr<pp::v1::ListJobStepsResponse> JobManager::ListSteps(
    const pp::v1::ListJobStepsRequest& request) {
  const int size = request.page_size() == 0 ? kDefaultStepsPage : request.page_size();
  if (size < 1 || size > kMaxStepsPage) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, ", kMaxStepsPage, "], got ", request.page_size()));
  }
  absl::StatusOr<int> from = FirstStep(request);
  if (!from.ok()) return from.status();
  {
    absl::MutexLock lock(&mu_);
    if (FindLocked(request.job_id()) == nullptr) {
      return absl::NotFoundError(absl::StrCat("job \"", request.job_id(), "\" not found"));
    }
  }
  absl::StatusOr<std::vector<pp::v1::JobStepRecord>> rows;
  {
    absl::MutexLock store_lock(&store_mu_);
    rows = store_->StepsFrom(request.job_id(), *from, size + 1);  // one more: is there a next?
  }
  if (!rows.ok()) return absl::UnavailableError(rows.status().message());
  pp::v1::ListJobStepsResponse page;
  for (int i = 0; i < static_cast<int>(rows->size()) && i < size; ++i) {
    *page.add_steps() = std::move((*rows)[i]);
  }
  if (static_cast<int>(rows->size()) > size) {
    page.set_next_page_token(absl::StrCat(kStepTokenPrefix, (*rows)[size].step()));
  }
  return page;
}

}  // namespace pp::coordinator

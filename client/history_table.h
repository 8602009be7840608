// `ppctl history`'s text: a job's recorded steps (ListJobSteps, every page) as a table, CSV or
// JSON lines. Pure (no RPC, no clock) so that tests can pin the text.
#ifndef PP_CLIENT_HISTORY_TABLE_H_
#define PP_CLIENT_HISTORY_TABLE_H_

#include <string>
#include <vector>

#include "pp/v1/coordinator.pb.h"

namespace pp::client {

// One of "table" (aligned columns for people), "csv" (a header line, then one line per step;
// empty fields where a step has no eval) or "json" (one proto3 JSON object per line, as
// ListJobSteps answers). Columns: step, attempt, loss, learning_rate, step_seconds,
// tokens_per_second, bubble_ratio, eval_loss, skipped.
std::string HistoryText(const std::vector<pp::v1::JobStepRecord>& steps, const std::string& format);

// Whether HistoryText knows `format`.
bool IsHistoryFormat(const std::string& format);

}  // namespace pp::client

#endif  // PP_CLIENT_HISTORY_TABLE_H_

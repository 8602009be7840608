#include "client/history_table.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace pp::client {
namespace {

std::string Table(const std::vector<pp::v1::JobStepRecord>& steps) {
  std::string out =
      absl::StrFormat("%8s %7s %9s %10s %9s %8s %11s %7s %9s %s\n", "STEP", "ATTEMPT", "LOSS", "LR",
                      "GRAD_NORM", "SECONDS", "TOKENS/S", "BUBBLE", "EVAL", "");
  for (const pp::v1::JobStepRecord& s : steps) {
    absl::StrAppendFormat(&out, "%8d %7d %9.4f %10.3g %9.4g %8.3f %11.0f %6.1f%% %9s %s\n",
                          s.step(), s.attempt(), s.loss(), s.learning_rate(), s.grad_norm(),
                          s.step_seconds(), s.tokens_per_second(), 100 * s.bubble_ratio(),
                          s.has_eval() ? absl::StrFormat("%.4f", s.eval_loss()) : "-",
                          s.skipped() ? "skipped" : "");
  }
  return out;
}

std::string Csv(const std::vector<pp::v1::JobStepRecord>& steps) {
  std::string out =
      "step,attempt,loss,learning_rate,grad_norm,step_seconds,tokens_per_second,bubble_ratio,"
      "eval_loss,skipped\n";
  for (const pp::v1::JobStepRecord& s : steps) {
    // %.17g: the loss as stored, so a CSV compares bit for bit with another run's.
    absl::StrAppendFormat(
        &out, "%d,%d,%.17g,%.17g,%.17g,%.6f,%.1f,%.6f,%s,%d\n", s.step(), s.attempt(), s.loss(),
        s.learning_rate(), s.grad_norm(), s.step_seconds(), s.tokens_per_second(), s.bubble_ratio(),
        s.has_eval() ? absl::StrFormat("%.17g", s.eval_loss()) : "", s.skipped() ? 1 : 0);
  }
  return out;
}

std::string JsonLines(const std::vector<pp::v1::JobStepRecord>& steps) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  for (const pp::v1::JobStepRecord& s : steps) {
    std::string line;
    (void)google::protobuf::util::MessageToJsonString(s, &line, options);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace

bool IsHistoryFormat(const std::string& format) {
  return format == "table" || format == "csv" || format == "json";
}

std::string HistoryText(const std::vector<pp::v1::JobStepRecord>& steps,
                        const std::string& format) {
  if (format == "csv") return Csv(steps);
  if (format == "json") return JsonLines(steps);
  if (steps.empty()) return "no steps recorded\n";
  return Table(steps);
}

}  // namespace pp::client

#include "coordinator/plan/torch_csv.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "program/lower.h"

namespace pp::plan {
namespace {

constexpr size_t kMaxTextBytes = size_t{64} << 20;
constexpr int64_t kMaxStageMicrobatches = int64_t{1} << 22;  // as program/schedules.cc's CheckSize

// torch's _ComputationType values for the IR's kinds, in Kind order.
constexpr const char* kTokens[] = {"F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
// Read and skipped (see the header).
constexpr const char* kSkipped[] = {"UNSHARD", "RESHARD", "REDUCE_GRAD"};

std::string Token(const prog::Action& a) {
  return absl::StrCat(a.stage, kTokens[static_cast<int>(a.kind)], a.microbatch);
}

// One action read from the file and where it was.
struct Cell {
  prog::Action action;
  int line = 0, column = 0;  // 1-based
  std::string text;          // the whole cell, for messages
};

absl::Status CellError(int line, int column, absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("line ", line, ", column ", column, " ('", text, "'): ", why));
}

// "12" -> 12; digits only, below the planner's bound.
bool ParseIndex(absl::string_view digits, int* out) {
  if (digits.empty() || digits.size() > 7) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value >= kMaxStageMicrobatches) return false;
  *out = static_cast<int>(value);
  return true;
}

// One "{stage}{kind}{microbatch}" action into `out`; false when it is a skipped kind. The
// kind is the longest token that follows the stage digits: torch's regex alternation lists F
// before the SEND_/RECV_ kinds, but no kind is a prefix of another at the same position.
absl::StatusOr<bool> ParseAction(absl::string_view s, prog::Action* out) {
  size_t digits = 0;
  while (digits < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[digits]))) {
    ++digits;
  }
  int stage = 0;
  if (!ParseIndex(s.substr(0, digits), &stage)) {
    return absl::InvalidArgumentError("not [stage][action][microbatch], e.g. 2F0");
  }
  absl::string_view rest = s.substr(digits);
  for (const char* skipped : kSkipped) {
    if (absl::StartsWith(rest, skipped)) return false;
  }
  for (int k = static_cast<int>(prog::Kind::kRecvGrad); k >= 0; --k) {
    if (!absl::StartsWith(rest, kTokens[k])) continue;
    const absl::string_view mb = rest.substr(absl::string_view(kTokens[k]).size());
    if (mb.empty()) return absl::InvalidArgumentError("has no microbatch");
    if (!ParseIndex(mb, &out->microbatch)) {
      return absl::InvalidArgumentError("microbatch is not a number below 2^22");
    }
    out->kind = static_cast<prog::Kind>(k);
    out->stage = stage;
    return true;
  }
  return absl::InvalidArgumentError(
      "unknown action type (known: F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, OVERLAP_F_B, "
      "UNSHARD, RESHARD, REDUCE_GRAD)");
}

// A cell, with "(a;b)OVERLAP_F_B" expanded into a and b.
absl::Status ParseCell(absl::string_view raw, int line, int column, std::vector<Cell>& row) {
  absl::string_view text = absl::StripAsciiWhitespace(raw);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
    text = text.substr(1, text.size() - 2);
  }
  if (text.empty()) return absl::OkStatus();
  std::vector<absl::string_view> parts = {text};
  if (text.front() == '(') {
    const size_t close = text.find(')');
    if (close == absl::string_view::npos || text.substr(close + 1) != "OVERLAP_F_B") {
      return CellError(line, column, text, "a group must be (a;b)OVERLAP_F_B");
    }
    parts = absl::StrSplit(text.substr(1, close - 1), ';', absl::SkipWhitespace());
  }
  for (absl::string_view part : parts) {
    Cell cell{{}, line, column, std::string(text)};
    absl::StatusOr<bool> kept = ParseAction(absl::StripAsciiWhitespace(part), &cell.action);
    if (!kept.ok()) return CellError(line, column, text, kept.status().message());
    if (*kept) row.push_back(std::move(cell));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<Cell>>> ParseRows(const std::string& text) {
  if (text.size() > kMaxTextBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule file of ", text.size(), " bytes; at most ", kMaxTextBytes));
  }
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the last row's line end
  if (lines.empty()) return absl::InvalidArgumentError("schedule file has no rows");
  std::vector<std::vector<Cell>> rows(lines.size());
  for (size_t r = 0; r < lines.size(); ++r) {
    absl::string_view line = lines[r];
    if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
    int column = 0;
    for (absl::string_view cell : absl::StrSplit(line, ',')) {
      if (absl::Status s = ParseCell(cell, static_cast<int>(r) + 1, ++column, rows[r]); !s.ok()) {
        return s;
      }
    }
  }
  return rows;
}

bool IsCompute(prog::Kind kind) { return !prog::IsComm(kind); }

// D, V, M and stage -> rank from the computes; InvalidArgument at the first cell that disagrees.
absl::StatusOr<prog::Schedule> Layout(const std::vector<std::vector<Cell>>& rows) {
  prog::Schedule schedule;
  schedule.name = prog::kScheduleFileName;
  schedule.pipeline = static_cast<int>(rows.size());
  int64_t stages = 0, microbatches = 0;
  for (const std::vector<Cell>& row : rows) {
    for (const Cell& c : row) {
      stages = std::max<int64_t>(stages, c.action.stage + 1);
      microbatches = std::max<int64_t>(microbatches, c.action.microbatch + 1);
    }
  }
  const int64_t D = schedule.pipeline;
  if (stages == 0 || stages % D != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the file names ", stages, " stages on ", D, " ranks (rows): S must be a multiple of D"));
  }
  if (stages * microbatches > kMaxStageMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S*M = ", stages * microbatches, " stage-microbatches; the planner handles at most ",
        kMaxStageMicrobatches));
  }
  schedule.chunks = static_cast<int>(stages / D);
  schedule.microbatches = static_cast<int>(microbatches);
  schedule.stage_to_rank.assign(stages, -1);
  for (int r = 0; r < schedule.pipeline; ++r) {
    for (const Cell& c : rows[r]) {
      int& owner = schedule.stage_to_rank[c.action.stage];
      if (!IsCompute(c.action.kind) || owner == r) continue;
      if (owner >= 0) {
        return CellError(c.line, c.column, c.text,
                         absl::StrCat("stage ", c.action.stage, " already computes on rank ",
                                      owner, " (line ", owner + 1, ")"));
      }
      owner = r;
    }
  }
  std::vector<int> held(D, 0);
  for (int64_t s = 0; s < stages; ++s) {
    if (schedule.stage_to_rank[s] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", s, " has no compute on any rank"));
    }
    ++held[schedule.stage_to_rank[s]];
  }
  for (int r = 0; r < schedule.pipeline; ++r) {
    if (held[r] != schedule.chunks) {
      return absl::InvalidArgumentError(absl::StrCat("line ", r + 1, ": rank ", r, " computes ",
                                                     held[r], " stages; every rank must hold V=",
                                                     schedule.chunks, " (S/D)"));
    }
  }
  schedule.programs.resize(D);
  return schedule;
}

// A comm action's peer: the rank of the neighbouring stage it talks to.
absl::Status SetPeer(const prog::Schedule& schedule, const Cell& c, prog::Action& a) {
  const bool toward_next = a.kind == prog::Kind::kSendActivation || a.kind == prog::Kind::kRecvGrad;
  const int other = a.stage + (toward_next ? 1 : -1);
  if (other < 0 || other >= schedule.stages()) {
    return CellError(c.line, c.column, c.text,
                     absl::StrCat("stage ", a.stage, " has no ", toward_next ? "next" : "previous",
                                  " stage to talk to"));
  }
  a.peer = schedule.stage_to_rank[other];
  return absl::OkStatus();
}

// "rank R, action I" (or "rank R ... at action I") in a validator message: where it points.
bool FindPlace(absl::string_view message, int* rank, int* action) {
  const size_t at = message.find("rank ");
  if (at == absl::string_view::npos) return false;
  absl::string_view rest = message.substr(at + 5);
  size_t n = 0;
  while (n < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[n]))) ++n;
  if (!absl::SimpleAtoi(rest.substr(0, n), rank)) return false;
  *action = -1;
  const size_t act = rest.find("action ");
  const size_t next_rank = rest.find("rank ");
  if (act == absl::string_view::npos || act > next_rank) return true;
  absl::string_view digits = rest.substr(act + 7);
  n = 0;
  while (n < digits.size() && absl::ascii_isdigit(static_cast<unsigned char>(digits[n]))) ++n;
  if (!absl::SimpleAtoi(digits.substr(0, n), action)) *action = -1;
  return true;
}

// Prefixes a validator error with the line and column of the cell it names.
absl::Status Locate(const absl::Status& status, const std::vector<std::vector<const Cell*>>& from) {
  int rank = -1, action = -1;
  if (!FindPlace(status.message(), &rank, &action) || rank < 0 ||
      rank >= static_cast<int>(from.size())) {
    return status;
  }
  if (action < 0 || action >= static_cast<int>(from[rank].size())) {
    return absl::InvalidArgumentError(absl::StrCat("line ", rank + 1, ": ", status.message()));
  }
  const Cell& c = *from[rank][action];
  return CellError(c.line, c.column, c.text, status.message());
}

}  // namespace

std::string ToTorchCsv(const prog::Schedule& schedule, CsvForm form) {
  std::string out;
  for (const std::vector<prog::Action>& program : schedule.programs) {
    bool first = true;
    for (const prog::Action& a : program) {
      if (form == CsvForm::kComputeOnly && prog::IsComm(a.kind)) continue;
      if (!first) out += ',';
      out += Token(a);
      first = false;
    }
    out += "\r\n";
  }
  return out;
}

absl::StatusOr<Planned> PlanTorchCsv(const std::string& text, const CostModel& costs) {
  absl::StatusOr<std::vector<std::vector<Cell>>> rows = ParseRows(text);
  if (!rows.ok()) return rows.status();
  absl::StatusOr<prog::Schedule> schedule = Layout(*rows);
  if (!schedule.ok()) return schedule.status();
  bool comms = false;
  for (const std::vector<Cell>& row : *rows) {
    for (const Cell& c : row) comms = comms || prog::IsComm(c.action.kind);
  }
  // Per rank, per action of the program to validate: the cell it came from.
  std::vector<std::vector<const Cell*>> from(rows->size());
  for (size_t r = 0; r < rows->size(); ++r) {
    std::vector<prog::Action>& program = schedule->programs[r];
    for (const Cell& c : (*rows)[r]) {
      prog::Action a = c.action;
      if (prog::IsComm(a.kind)) {
        if (absl::Status s = SetPeer(*schedule, c, a); !s.ok()) return s;
      }
      const size_t before = program.size();
      if (comms) {
        program.push_back(a);
      } else {
        prog::internal::AppendLowered(*schedule, a, program);
      }
      from[r].insert(from[r].end(), program.size() - before, &c);
    }
  }
  absl::StatusOr<Simulation> simulation = ValidateAndSimulate(*schedule, costs);
  if (!simulation.ok()) return Locate(simulation.status(), from);
  return Planned{*std::move(schedule), *std::move(simulation)};
}

}  // namespace pp::plan

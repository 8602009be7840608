#include "client/schedule_json.h"

#include <charconv>
#include <cstdio>
#include <utility>

#include "absl/status/status.h"
#include "google/protobuf/util/json_util.h"

namespace pp::client {
namespace {

// Where the JSON goes: kept whole in `text` (file == nullptr), or written to `file` in pieces of
// about 1 MB, so a 90 MB schedule never sits in memory twice (its pages cost more than the
// formatting).
struct Sink {
  std::FILE* file = nullptr;
  std::string text;
  bool failed = false;

  void MaybeFlush() {
    if (file != nullptr && text.size() >= (1 << 20)) Flush();
  }
  void Flush() {
    if (file == nullptr || text.empty()) return;
    failed |= std::fwrite(text.data(), 1, text.size(), file) != text.size();
    text.clear();
  }
};

void AppendInt(int value, std::string* out) {
  char buf[16];
  const auto end = std::to_chars(buf, buf + sizeof(buf), value).ptr;
  out->append(buf, end);
}

// One action as protobuf prints it: fields in field-number order, the enum by name, `peer` (a
// proto3 optional) only when set, i.e. on comm actions.
void AppendAction(const prog::Action& a, std::string* out) {
  out->append(R"({"kind":")");
  out->append(prog::KindName(a.kind));
  out->append(R"(","stage":)");
  AppendInt(a.stage, out);
  out->append(R"(,"microbatch":)");
  AppendInt(a.microbatch, out);
  if (prog::IsComm(a.kind)) {
    out->append(R"(,"peer":)");
    AppendInt(a.peer, out);
  }
  out->push_back('}');
}

// `[{"rank":0,"actions":[...]},...]`
void AppendPrograms(const prog::Schedule& schedule, Sink& sink) {
  std::string* out = &sink.text;
  if (sink.file == nullptr) {
    size_t actions = 0;
    for (const auto& program : schedule.programs) actions += program.size();
    out->reserve(out->size() + 64 * actions + 32 * schedule.programs.size());
  }
  out->push_back('[');
  for (size_t r = 0; r < schedule.programs.size(); ++r) {
    if (r > 0) out->push_back(',');
    out->append(R"({"rank":)");
    AppendInt(static_cast<int>(r), out);
    out->append(R"(,"actions":[)");
    const auto& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      if (i > 0) out->push_back(',');
      AppendAction(program[i], out);
      if ((i & 1023) == 0) sink.MaybeFlush();
    }
    out->append("]}");
  }
  out->push_back(']');
}

absl::StatusOr<std::string> ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::InternalError(status.ToString());
  return json;
}

// The splice: `message`'s protobuf JSON with the programs written in place of its empty ranks.
absl::Status Splice(const google::protobuf::Message& message, const prog::Schedule& schedule,
                    Sink& sink) {
  absl::StatusOr<std::string> header = ProtoJson(message);
  if (!header.ok()) return header.status();
  // A Schedule prints stageToRank (field 5) right before ranks (field 6); a string value cannot
  // hold the unescaped quotes of `"stageToRank":`, so the first match is the field itself.
  const size_t map = header->find(R"("stageToRank":[)");
  const std::string empty = R"(,"ranks":[])";
  const size_t at = map == std::string::npos ? map : header->find(empty, map);
  if (at == std::string::npos) {
    return absl::InternalError("schedule JSON: no empty \"ranks\" after \"stageToRank\"");
  }
  sink.text.append(*header, 0, at + empty.size() - 2);  // up to and including `"ranks":`
  AppendPrograms(schedule, sink);
  sink.text.append(*header, at + empty.size());
  return absl::OkStatus();
}

}  // namespace

prog::Schedule WithoutPrograms(const prog::Schedule& schedule) {
  return {schedule.name, schedule.pipeline, schedule.chunks, schedule.microbatches,
          schedule.stage_to_rank, {}};
}

absl::StatusOr<std::string> JsonWithPrograms(const google::protobuf::Message& message,
                                             const prog::Schedule& schedule) {
  Sink sink;
  if (absl::Status s = Splice(message, schedule, sink); !s.ok()) return s;
  return std::move(sink.text);
}

absl::Status WriteJsonWithPrograms(const google::protobuf::Message& message,
                                   const prog::Schedule& schedule, std::FILE* file) {
  Sink sink{file};
  if (absl::Status s = Splice(message, schedule, sink); !s.ok()) return s;
  sink.text.push_back('\n');
  sink.Flush();
  if (sink.failed || std::fflush(file) != 0) {
    return absl::UnavailableError("cannot write the schedule JSON");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ScheduleJson(const prog::Schedule& schedule,
                                         const plan::Simulation* simulation) {
  return JsonWithPrograms(plan::ScheduleToProto(WithoutPrograms(schedule), simulation), schedule);
}

}  // namespace pp::client

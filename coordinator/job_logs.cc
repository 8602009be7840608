#include "coordinator/job_logs.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/jobs.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "pp/v1/worker.grpc.pb.h"

namespace pp::coordinator {
namespace {

// Opaque to clients (AIP-158); versioned so that a later format can tell its tokens apart.
constexpr char kLogTokenPrefix[] = "logs-";
constexpr char kLogTokenVersion[] = "v1";

absl::Status BadToken() {
  return absl::InvalidArgumentError("page_token: not a token GetJobLogs handed out");
}

pp::v1::JobLogLine ToJobLine(const std::string& worker, const pp::v1::TaskLogLine& line) {
  pp::v1::JobLogLine out;
  out.set_worker(worker);
  out.set_attempt(line.attempt());
  out.set_rank(line.rank());
  out.set_seq(line.seq());
  out.set_time_unix(line.time_unix());
  out.set_text(line.text());
  return out;
}

}  // namespace

// The payload is one "SEQ NAME" line per worker (the name C-escaped: a name may hold any byte),
// in name order, after a version line; base64 keeps it one opaque word.
std::string EncodeLogToken(const LogPositions& positions) {
  std::string payload = kLogTokenVersion;
  for (const auto& [worker, seq] : positions) {
    absl::StrAppend(&payload, "\n", seq, " ", absl::CHexEscape(worker));
  }
  return absl::StrCat(kLogTokenPrefix, absl::WebSafeBase64Escape(payload));
}

absl::StatusOr<LogPositions> DecodeLogToken(absl::string_view token) {
  std::string payload;
  if (!absl::ConsumePrefix(&token, kLogTokenPrefix) ||
      !absl::WebSafeBase64Unescape(token, &payload)) {
    return BadToken();
  }
  std::vector<absl::string_view> lines = absl::StrSplit(payload, '\n');
  if (lines.empty() || lines[0] != kLogTokenVersion) return BadToken();
  LogPositions positions;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> fields =
        absl::StrSplit(lines[i], absl::MaxSplits(' ', 1));
    int64_t seq = 0;
    std::string worker;
    if (!absl::SimpleAtoi(fields.first, &seq) || seq < 0 ||
        !absl::CUnescape(fields.second, &worker) || worker.empty() ||
        (!positions.empty() && worker <= positions.rbegin()->first)) {
      return BadToken();  // also a name out of order or twice: EncodeLogToken writes neither
    }
    positions[worker] = seq;
  }
  return positions;
}

absl::StatusOr<LogsQuery> CheckLogsRequest(const pp::v1::GetJobLogsRequest& request) {
  LogsQuery query;
  query.job_id = request.job_id();
  if (request.max_lines() < 0 || request.max_lines() > kMaxLogLines) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_lines: must be in [0, ", kMaxLogLines, "], got ", request.max_lines()));
  }
  if (request.max_lines() > 0) query.max_lines = request.max_lines();
  if (request.has_rank()) {
    if (request.rank() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("rank: must be >= 0, got ", request.rank()));
    }
    query.rank = request.rank();
  }
  if (!request.page_token().empty()) {
    absl::StatusOr<LogPositions> positions = DecodeLogToken(request.page_token());
    if (!positions.ok()) return positions.status();
    query.positions = *std::move(positions);
  }
  return query;
}

pp::v1::GetJobLogsResponse MergeJobLogs(std::vector<WorkerLog> logs, const LogsQuery& query) {
  std::sort(logs.begin(), logs.end(),
            [](const WorkerLog& a, const WorkerLog& b) { return a.worker < b.worker; });
  LogPositions positions = query.positions;
  pp::v1::GetJobLogsResponse page;
  int64_t bytes = 0;
  auto full = [&] { return page.lines_size() >= query.max_lines || bytes >= kMaxLogPageBytes; };
  for (const WorkerLog& log : logs) {
    // A full page reaches no further worker: its lines and its dropped count wait for the next.
    if (full()) break;
    int64_t& position = positions[log.worker];
    page.set_dropped(page.dropped() + log.answer.dropped());
    for (const pp::v1::TaskLogLine& line : log.answer.lines()) {
      if (line.seq() <= position) continue;  // never sent after after_seq; kept out regardless
      const bool wanted = !query.rank.has_value() || line.rank() == *query.rank;
      const int64_t size = static_cast<int64_t>(line.text().size() + log.worker.size());
      if (wanted && (page.lines_size() >= query.max_lines ||
                     (page.lines_size() > 0 && bytes + size > kMaxLogPageBytes))) {
        bytes = kMaxLogPageBytes;  // full: no later worker is reached
        break;
      }
      if (wanted) {
        *page.add_lines() = ToJobLine(log.worker, line);
        bytes += size;
      }
      position = line.seq();  // another rank's line is read past
    }
  }
  std::erase_if(positions, [](const auto& entry) { return entry.second == 0; });
  page.set_next_page_token(EncodeLogToken(positions));
  return page;
}

JobLogReader::JobLogReader(std::shared_ptr<grpc::ChannelCredentials> credentials,
                           absl::Duration deadline)
    : credentials_(credentials != nullptr ? std::move(credentials)
                                          : grpc::InsecureChannelCredentials()),
      deadline_(deadline) {}

std::shared_ptr<grpc::Channel> JobLogReader::ChannelFor(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) channel = grpc::CreateChannel(address, credentials_);
  return channel;
}

void JobLogReader::Prune(const std::vector<pp::v1::WorkerInfo>& live) {
  std::set<std::string> addresses;
  for (const pp::v1::WorkerInfo& worker : live) addresses.insert(worker.address());
  absl::MutexLock lock(&mu_);
  std::erase_if(channels_, [&](const auto& entry) { return addresses.count(entry.first) == 0; });
}

namespace {

// One ReadTaskLog in flight; its completion queue tag is its address.
struct LogCall {
  std::string worker;
  std::unique_ptr<pp::v1::Worker::Stub> stub;
  grpc::ClientContext context;
  pp::v1::ReadTaskLogRequest request;
  pp::v1::ReadTaskLogResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pp::v1::ReadTaskLogResponse>> reader;
};

}  // namespace

absl::StatusOr<pp::v1::GetJobLogsResponse> JobLogReader::Read(
    JobManager& jobs, const pp::v1::GetJobLogsRequest& request) {
  absl::StatusOr<LogsQuery> query = CheckLogsRequest(request);
  if (!query.ok()) return query.status();
  if (absl::StatusOr<pp::v1::Job> job = jobs.Get(request.job_id()); !job.ok()) return job.status();
  std::vector<pp::v1::WorkerInfo> live;
  for (pp::v1::WorkerInfo& worker : jobs.Workers()) {
    if (worker.state() == pp::v1::IDLE || worker.state() == pp::v1::BUSY) {
      live.push_back(std::move(worker));
    }
  }
  Prune(live);
  // A worker no longer registered has nothing more to say: its position goes.
  LogPositions known;
  for (const pp::v1::WorkerInfo& worker : live) {
    if (auto it = query->positions.find(worker.name()); it != query->positions.end()) {
      known.insert(*it);
    }
  }
  query->positions = std::move(known);
  std::vector<WorkerLog> answered;
  std::vector<std::string> unreachable;
  Ask(live, *query, &answered, &unreachable);
  pp::v1::GetJobLogsResponse page = MergeJobLogs(std::move(answered), *query);
  for (std::string& worker : unreachable) page.add_unreachable(std::move(worker));
  return page;
}

void JobLogReader::Ask(const std::vector<pp::v1::WorkerInfo>& workers, const LogsQuery& query,
                       std::vector<WorkerLog>* answered, std::vector<std::string>* unreachable) {
  // Every worker at once, each bounded by the deadline: gRPC completes every call by then.
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<LogCall>> calls;
  for (const pp::v1::WorkerInfo& worker : workers) {
    auto call = std::make_unique<LogCall>();
    call->worker = worker.name();
    call->stub = pp::v1::Worker::NewStub(ChannelFor(worker.address()));
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    call->request.set_job_id(query.job_id);
    auto it = query.positions.find(worker.name());
    call->request.set_after_seq(it == query.positions.end() ? 0 : it->second);
    call->request.set_max_lines(query.max_lines);
    call->reader = call->stub->AsyncReadTaskLog(&call->context, call->request, &queue);
    call->reader->Finish(&call->response, &call->status, call.get());
    calls.push_back(std::move(call));
  }
  void* tag = nullptr;
  bool ok = false;
  for (size_t done = 0; done < calls.size() && queue.Next(&tag, &ok); ++done) {
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }  // a queue is drained before it is destroyed
  for (std::unique_ptr<LogCall>& call : calls) {
    if (call->status.ok()) {
      answered->push_back({call->worker, std::move(call->response)});
    } else {
      unreachable->push_back(call->worker);
    }
  }
}

}  // namespace pp::coordinator

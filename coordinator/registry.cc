#include "coordinator/registry.h"

#include "absl/strings/str_cat.h"

namespace pp::coordinator {
namespace {

double ToUnix(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

}  // namespace

absl::Status WorkerTable::Register(const pp::v1::WorkerInfo& info, absl::Time now) {
  if (info.name().empty()) return absl::InvalidArgumentError("worker.name: must not be empty");
  if (info.address().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.address: must not be empty (worker ", info.name(), ")"));
  }
  if (!workers_.contains(info.name()) && static_cast<int>(workers_.size()) >= max_workers_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", info.name(), " not registered: ", workers_.size(),
                     " workers are registered, the limit (DOWN ones are forgotten after ",
                     absl::FormatDuration(kDownWorkerTtl), ")"));
  }
  pp::v1::WorkerInfo& w = workers_[info.name()];
  w = info;
  w.set_state(info.job_id().empty() ? pp::v1::IDLE : pp::v1::BUSY);
  w.set_last_heartbeat_unix(ToUnix(now));
  return absl::OkStatus();
}

bool WorkerTable::Heartbeat(const std::string& name, absl::Time now) {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.state() == pp::v1::DOWN) return false;
  it->second.set_last_heartbeat_unix(ToUnix(now));
  return true;
}

std::vector<pp::v1::WorkerInfo> WorkerTable::MarkSilentDown(absl::Time now,
                                                            absl::Duration timeout) {
  std::vector<pp::v1::WorkerInfo> down;
  const double limit = ToUnix(now) - absl::ToDoubleSeconds(timeout);
  for (auto& [name, w] : workers_) {
    if (w.state() == pp::v1::DOWN || w.last_heartbeat_unix() >= limit) continue;
    down.push_back(w);
    w.set_state(pp::v1::DOWN);
    w.clear_job_id();
  }
  return down;
}

std::vector<std::string> WorkerTable::ForgetDown(
    absl::Time now, absl::Duration ttl, const std::function<bool(const std::string&)>& keep) {
  std::vector<std::string> forgotten;
  const double limit = ToUnix(now) - absl::ToDoubleSeconds(ttl);
  for (auto it = workers_.begin(); it != workers_.end();) {
    const pp::v1::WorkerInfo& w = it->second;
    if (w.state() == pp::v1::DOWN && w.last_heartbeat_unix() < limit && !keep(w.name())) {
      forgotten.push_back(w.name());
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  return forgotten;
}

std::vector<pp::v1::WorkerInfo> WorkerTable::Idle() const {
  std::vector<pp::v1::WorkerInfo> idle;
  for (const auto& [name, w] : workers_) {
    if (w.state() == pp::v1::IDLE) idle.push_back(w);
  }
  return idle;
}

void WorkerTable::SetBusy(const std::string& name, const std::string& job_id) {
  auto it = workers_.find(name);
  if (it == workers_.end()) return;
  it->second.set_state(pp::v1::BUSY);
  it->second.set_job_id(job_id);
}

void WorkerTable::SetIdle(const std::string& name) {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.state() == pp::v1::DOWN) return;
  it->second.set_state(pp::v1::IDLE);
  it->second.clear_job_id();
}

void WorkerTable::SetDown(const std::string& name) {
  auto it = workers_.find(name);
  if (it == workers_.end()) return;
  it->second.set_state(pp::v1::DOWN);
  it->second.clear_job_id();
}

const pp::v1::WorkerInfo* WorkerTable::Find(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

std::vector<pp::v1::WorkerInfo> WorkerTable::All() const {
  std::vector<pp::v1::WorkerInfo> all;
  for (const auto& [name, w] : workers_) all.push_back(w);
  return all;
}

int WorkerTable::CountInState(pp::v1::WorkerState state) const {
  int n = 0;
  for (const auto& [name, w] : workers_) n += w.state() == state;
  return n;
}

}  // namespace pp::coordinator

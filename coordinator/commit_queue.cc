#include "coordinator/commit_queue.h"

namespace pp::coordinator {

int64_t CommitQueue::MarkDirty(const std::string& job_id) {
  const int64_t ticket = next_ticket_++;
  dirty_[job_id] = ticket;
  return ticket;
}

const StoredRow* CommitQueue::WrittenAt(const std::string& job_id, int64_t ticket) const {
  auto it = stored_.find(job_id);
  return it != stored_.end() && it->second.ticket >= ticket ? &it->second : nullptr;
}

}  // namespace pp::coordinator

// `ppctl queue`'s text: the QUEUED jobs of a shared ppcoord in the order it will try them, and a
// line on what runs. Pure (no RPC, no clock) so that tests can pin the text.
#ifndef PP_CLIENT_QUEUE_TABLE_H_
#define PP_CLIENT_QUEUE_TABLE_H_

#include <string>
#include <vector>

#include "pp/v1/job.pb.h"

namespace pp::client {

// `jobs` are ListJobs' answers, every page, in its (submission) order; `now_unix` the time to
// measure waits against. Returns a header and one line per QUEUED job, by Job.queue_position
// (0, unknown: last, in submission order), or "no queued jobs"; then "running: N jobs on W
// workers". Columns: POS, JOB, PRIORITY ("high (200)"), OWNER, WORKERS, WAITING, EST START
// ("~4:10", "now", "unknown"), REASON.
std::string QueueTable(const std::vector<pp::v1::Job>& jobs, double now_unix);

}  // namespace pp::client

#endif  // PP_CLIENT_QUEUE_TABLE_H_

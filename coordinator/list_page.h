// Paging of a listing in the AIP-158 shape: a page size and an opaque token
// that names where the next page starts. Pure: no locks, no RPC, no clock.
//
// A page is bounded by count (page_size) and by bytes: it ends before the item
// that would take its response over a byte budget, well under gRPC's 4 MiB
// message limit, so that no number of large items makes a listing fail.
//
// The items are ids that end in "-<number>", numbered upwards along the order
// (job ids: MakeJobId, coordinator/job_logic.h). Items are appended, or removed
// (an expired job), never reordered or reused. The token encodes the id of the
// last item of the page before, so a page stays correct while items are
// appended behind it; when that item was removed since, the page starts at the
// first item numbered after it.
#ifndef PP_COORDINATOR_LIST_PAGE_H_
#define PP_COORDINATOR_LIST_PAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pp::coordinator {

inline constexpr int kDefaultPageSize = 100;  // page_size 0
inline constexpr int kMaxPageSize = 1000;     // larger page sizes are lowered to this
// A page's response in bytes: half of gRPC's default 4 MiB limit. A page holds at least one
// item, and one job (its spec at most common::kMaxSpecBytes, 1.06 MiB) fits well within it.
inline constexpr size_t kMaxPageBytes = size_t{2} << 20;

struct ListPage {
  size_t begin = 0;             // index into the order of the page's first item
  size_t end = 0;               // one past its last
  std::string next_page_token;  // empty on the last page
};

// The page of `order` (ids, oldest first) that `page_size` and `page_token`
// select, ended early where the response would pass `byte_budget`: the items'
// `item_bytes(i)` (what order[i] adds to the response, its field's tag and
// length included) plus the next_page_token's field. INVALID_ARGUMENT for a
// negative page_size or a token that no page of `order` handed out.
absl::StatusOr<ListPage> SelectPage(const std::vector<std::string> &order, int page_size,
                                    const std::string &page_token,
                                    const std::function<size_t(size_t)> &item_bytes,
                                    size_t byte_budget = kMaxPageBytes);

// The bytes of a length-delimited field numbered 1 to 15 (ListJobsResponse's
// jobs and next_page_token) whose payload is `payload_bytes`: a one-byte tag,
// the length as a varint, the payload. Saturates at SIZE_MAX.
size_t FieldBytes(size_t payload_bytes);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_LIST_PAGE_H_

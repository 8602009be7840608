// Paging of a listing in the AIP-158 shape: a page size and an opaque token
// that names where the next page starts. Pure: no locks, no RPC, no clock.
//
// The token encodes the id of the last item of the page before, so a page stays
// correct while new items are appended behind it (ids are never reused and
// items are never removed from the order).
#ifndef PP_COORDINATOR_LIST_PAGE_H_
#define PP_COORDINATOR_LIST_PAGE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pp::coordinator {

inline constexpr int kDefaultPageSize = 100;  // page_size 0
inline constexpr int kMaxPageSize = 1000;     // larger page sizes are lowered to this

struct ListPage {
  size_t begin = 0;             // index into the order of the page's first item
  size_t end = 0;               // one past its last
  std::string next_page_token;  // empty on the last page
};

// The page of `order` (ids, oldest first) that `page_size` and `page_token`
// select. INVALID_ARGUMENT for a negative page_size or a token that no page of
// `order` handed out.
absl::StatusOr<ListPage> SelectPage(const std::vector<std::string> &order, int page_size,
                                    const std::string &page_token);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_LIST_PAGE_H_

#include "coordinator/list_page.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pp::coordinator {
namespace {

// A version prefix lets the format change later without old tokens being
// misread.
constexpr char kTokenPrefix[] = "after:";

std::string EncodeToken(const std::string &last_id) {
  return absl::WebSafeBase64Escape(absl::StrCat(kTokenPrefix, last_id));
}

absl::StatusOr<size_t> DecodeToken(const std::vector<std::string> &order,
                                   const std::string &token) {
  if (token.empty()) return 0;
  std::string plain;
  if (!absl::WebSafeBase64Unescape(token, &plain) || !absl::StartsWith(plain, kTokenPrefix)) {
    return absl::InvalidArgumentError("page_token: not a token this service handed out");
  }
  const std::string last_id = plain.substr(sizeof(kTokenPrefix) - 1);
  auto it = std::find(order.begin(), order.end(), last_id);
  if (it == order.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: names job \"", last_id, "\", which is not known"));
  }
  return static_cast<size_t>(it - order.begin()) + 1;
}

}  // namespace

absl::StatusOr<ListPage> SelectPage(const std::vector<std::string> &order, int page_size,
                                    const std::string &page_token) {
  if (page_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: ", page_size, " is negative (0 means ", kDefaultPageSize, ")"));
  }
  if (page_size == 0) page_size = kDefaultPageSize;
  page_size = std::min(page_size, kMaxPageSize);
  absl::StatusOr<size_t> begin = DecodeToken(order, page_token);
  if (!begin.ok()) return begin.status();
  ListPage page;
  page.begin = *begin;
  page.end = std::min(order.size(), page.begin + static_cast<size_t>(page_size));
  if (page.end < order.size()) page.next_page_token = EncodeToken(order[page.end - 1]);
  return page;
}

}  // namespace pp::coordinator

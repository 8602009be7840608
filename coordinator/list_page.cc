#include "coordinator/list_page.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pp::coordinator {
namespace {

// A version prefix lets the format change later without old tokens being
// misread.
constexpr char kTokenPrefix[] = "after:";

std::string EncodeToken(const std::string &last_id) {
  return absl::WebSafeBase64Escape(absl::StrCat(kTokenPrefix, last_id));
}

size_t SaturatingAdd(size_t a, size_t b) {
  return a > std::numeric_limits<size_t>::max() - b ? std::numeric_limits<size_t>::max() : a + b;
}

// The number an id ends in ("tiny-12": 12); nullopt when it ends in none.
std::optional<int64_t> IdNumber(absl::string_view id) {
  const size_t dash = id.rfind('-');
  int64_t number = 0;
  if (dash == absl::string_view::npos || !absl::SimpleAtoi(id.substr(dash + 1), &number)) {
    return std::nullopt;
  }
  return number;
}

// Where the page after `last_id` starts when that id is no longer in `order`
// (its job expired): at the first id numbered after it. nullopt for an id
// numbered past the newest, which no page handed out.
std::optional<size_t> AfterRemoved(const std::vector<std::string> &order,
                                   const std::string &last_id) {
  const std::optional<int64_t> number = IdNumber(last_id);
  const std::optional<int64_t> newest =
      order.empty() ? std::nullopt : IdNumber(order.back());
  if (!number || !newest || *number >= *newest) return std::nullopt;
  auto first_after = std::partition_point(order.begin(), order.end(), [&](const std::string &id) {
    const std::optional<int64_t> n = IdNumber(id);
    return n && *n < *number;
  });
  return static_cast<size_t>(first_after - order.begin());
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
  if (it != order.end()) return static_cast<size_t>(it - order.begin()) + 1;
  if (std::optional<size_t> after = AfterRemoved(order, last_id)) return *after;
  return absl::InvalidArgumentError(
      absl::StrCat("page_token: names job \"", last_id, "\", which is not known"));
}

}  // namespace

size_t FieldBytes(size_t payload_bytes) {
  size_t varint = 1;
  for (size_t rest = payload_bytes >> 7; rest != 0; rest >>= 7) ++varint;
  return SaturatingAdd(1 + varint, payload_bytes);
}

absl::StatusOr<ListPage> SelectPage(const std::vector<std::string> &order, int page_size,
                                    const std::string &page_token,
                                    const std::function<size_t(size_t)> &item_bytes,
                                    size_t byte_budget) {
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
  page.end = page.begin;
  const size_t last = std::min(order.size(), page.begin + static_cast<size_t>(page_size));
  size_t bytes = 0;
  while (page.end < last) {
    const size_t with_item = SaturatingAdd(bytes, item_bytes(page.end));
    // The token the page would end with, unless this item is the order's last.
    const size_t token = page.end + 1 < order.size()
                             ? FieldBytes(EncodeToken(order[page.end]).size())
                             : 0;
    if (page.end > page.begin && SaturatingAdd(with_item, token) > byte_budget) break;
    bytes = with_item;
    ++page.end;
  }
  if (page.end < order.size()) page.next_page_token = EncodeToken(order[page.end - 1]);
  return page;
}

}  // namespace pp::coordinator

// Durations as people read them on a progress line: "1:02:03" or "2:03".
#ifndef PP_CLIENT_CLOCK_TEXT_H_
#define PP_CLIENT_CLOCK_TEXT_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"

namespace pp::client {

// Rounded to the second; negative times show as 0:00. Inline so that every ppctl source using it
// (and the tests that compile one of them alone) needs no other file.
inline std::string ClockText(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace pp::client

#endif  // PP_CLIENT_CLOCK_TEXT_H_

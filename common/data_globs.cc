// The naming side of common/data_spec.h: glob expansion and resolution, and the paths a data spec
// names. Split from data_spec.cc, which checks what these name.
#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/data_spec.h"
#include "common/path_roots.h"
#include "common/spec_bounds.h"
#include "common/spec_field.h"

namespace pp::common {
namespace {

using spec::Field;

// A path with one of these is a pattern; a resolved name with one would read as a pattern again.
constexpr char kPatternChars[] = "*?[";

bool IsPattern(absl::string_view path) {
  return path.find_first_of(kPatternChars) != absl::string_view::npos;
}

bool IsMix(const pp::v1::DataSpec& data) { return data.mix_size() > 0; }

// glob(3)'s error callback: a folder that is missing or not one matches nothing; any other
// failure to list one (no permission, I/O) stops the expansion, whose list would lack files.
int StopUnlessMissing(const char* /*path*/, int error) {
  return error == ENOENT || error == ENOTDIR ? 0 : 1;
}

// `pattern`'s matches in byte order (or `pattern` itself when it is none), appended to `files`;
// it stops one past kMaxDataFiles, for the caller to refuse.
absl::Status Expand(const std::string& field, const std::string& pattern,
                    std::vector<DataFile>* files) {
  if (!IsPattern(pattern)) {
    files->push_back({field, pattern});
    return absl::OkStatus();
  }
  glob_t found{};
  // GLOB_NOSORT: glob sorts by the locale's collation; the order here must be the bytes'.
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, StopUnlessMissing, &found);
  std::vector<std::string> matches;
  if (rc == 0) matches.assign(found.gl_pathv, found.gl_pathv + found.gl_pathc);
  ::globfree(&found);
  if (rc == GLOB_NOMATCH) return Field(field, absl::StrCat(pattern, " matches no file"));
  if (rc != 0) return Field(field, absl::StrCat(pattern, ": cannot list its folders"));
  std::sort(matches.begin(), matches.end());
  for (std::string& match : matches) {
    if (IsPattern(match)) {
      return Field(field, absl::StrCat(pattern, " matches ", match,
                                       ", whose name holds one of * ? [ (rename it)"));
    }
    if (static_cast<int64_t>(files->size()) > kMaxDataFiles) break;
    files->push_back({field, std::move(match)});
  }
  return absl::OkStatus();
}

// Every file of `data` (each mix source's in turn) appended to `files`, bounded in number.
absl::Status AppendFiles(absl::string_view field, const pp::v1::DataSpec& data,
                         std::vector<DataFile>* files) {
  for (int i = 0; i < data.mix_size(); ++i) {
    absl::Status s =
        AppendFiles(absl::StrCat(field, ".mix[", i, "].data"), data.mix(i).data(), files);
    if (!s.ok()) return s;
  }
  if (IsMix(data) || data.format() == "generated") return absl::OkStatus();
  std::vector<std::pair<std::string, std::string>> named;
  if (!data.path().empty()) named.emplace_back(absl::StrCat(field, ".path"), data.path());
  for (int i = 0; i < data.paths_size(); ++i) {
    named.emplace_back(absl::StrCat(field, ".paths[", i, "]"), data.paths(i));
  }
  for (const auto& [name, path] : named) {
    if (absl::Status s = Expand(name, path, files); !s.ok()) return s;
    if (static_cast<int64_t>(files->size()) > kMaxDataFiles) {
      return Field(name, absl::StrCat(path, ": the job's data is over the limit of ", kMaxDataFiles,
                                      " files (every worker holds each open)"));
    }
  }
  return absl::OkStatus();
}

// Rewrites a stream's patterns as the explicit list of their matches.
absl::Status ResolveStream(absl::string_view field, pp::v1::DataSpec* data) {
  for (int i = 0; i < data->mix_size(); ++i) {
    absl::Status s = ResolveStream(absl::StrCat(field, ".mix[", i, "].data"),
                                   data->mutable_mix(i)->mutable_data());
    if (!s.ok()) return s;
  }
  if (IsMix(*data) || data->format() == "generated") return absl::OkStatus();
  const bool patterned =
      IsPattern(data->path()) || std::any_of(data->paths().begin(), data->paths().end(),
                                             [](const std::string& p) { return IsPattern(p); });
  if (!patterned) return absl::OkStatus();
  absl::StatusOr<std::vector<DataFile>> files = StreamFiles(field, *data);
  if (!files.ok()) return files.status();
  data->clear_path();
  data->clear_paths();
  for (DataFile& file : *files) data->add_paths(std::move(file.path));
  return absl::OkStatus();
}

// A pattern lists folders of the daemon's disk before any file is opened under the roots, so it
// must stay inside them itself: absolute, no ".." component, and its folder before the first
// pattern component under a root. Otherwise a glob would tell a client which files exist outside
// --data_root (matches, or "matches no file") and could walk the whole disk.
absl::Status CheckPatternUnderRoots(const std::string& field, const std::string& pattern,
                                    const std::vector<std::string>& roots) {
  if (roots.empty() || !IsPattern(pattern)) return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(pattern, '/');
  if (pattern.front() != '/') {
    return Field(field, absl::StrCat(pattern, ": a glob must be absolute"));
  }
  std::string folder;
  for (const std::string& part : parts) {
    if (part == "..") return Field(field, absl::StrCat(pattern, ": a glob may not hold \"..\""));
  }
  for (size_t i = 0; i + 1 < parts.size() && !IsPattern(parts[i]); ++i) {
    if (!parts[i].empty()) absl::StrAppend(&folder, "/", parts[i]);
  }
  return CheckUnderRoots(field, folder.empty() ? "/" : folder, roots, "data_root");
}

}  // namespace

absl::StatusOr<std::vector<DataFile>> StreamFiles(absl::string_view field,
                                                  const pp::v1::DataSpec& data) {
  std::vector<DataFile> files;
  if (absl::Status s = AppendFiles(field, data, &files); !s.ok()) return s;
  return files;
}

absl::StatusOr<pp::v1::JobSpec> ResolveDataGlobs(pp::v1::JobSpec spec,
                                                 const std::vector<std::string>& roots) {
  for (const auto& [field, path] : DataInputPaths("data", spec.data())) {
    if (absl::Status s = CheckPatternUnderRoots(field, path, roots); !s.ok()) return s;
  }
  for (const auto& [field, path] : DataInputPaths("eval.data", spec.eval().data())) {
    if (absl::Status s = CheckPatternUnderRoots(field, path, roots); !s.ok()) return s;
  }
  if (absl::Status s = ResolveStream("data", spec.mutable_data()); !s.ok()) return s;
  if (spec.eval().has_data()) {
    absl::Status s = ResolveStream("eval.data", spec.mutable_eval()->mutable_data());
    if (!s.ok()) return s;
  }
  // The bound holds for the job as a whole: every worker opens data and eval.data.
  std::vector<DataFile> files;
  if (absl::Status s = AppendFiles("data", spec.data(), &files); !s.ok()) return s;
  if (absl::Status s = AppendFiles("eval.data", spec.eval().data(), &files); !s.ok()) return s;
  return spec;
}

namespace {

void AbsoluteStream(pp::v1::DataSpec* data) {
  auto absolute = [](std::string* path) {
    if (!path->empty()) *path = std::filesystem::absolute(*path).string();
  };
  absolute(data->mutable_path());
  for (std::string& path : *data->mutable_paths()) absolute(&path);
  for (pp::v1::WeightedData& source : *data->mutable_mix()) AbsoluteStream(source.mutable_data());
  absolute(data->mutable_tokenizer());
}

}  // namespace

void AbsoluteDataPaths(pp::v1::JobSpec* spec) {
  AbsoluteStream(spec->mutable_data());
  if (spec->eval().has_data()) AbsoluteStream(spec->mutable_eval()->mutable_data());
}

std::vector<std::pair<std::string, std::string>> DataInputPaths(absl::string_view field,
                                                                const pp::v1::DataSpec& data) {
  std::vector<std::pair<std::string, std::string>> paths;
  if (!data.path().empty()) paths.emplace_back(absl::StrCat(field, ".path"), data.path());
  for (int i = 0; i < data.paths_size(); ++i) {
    paths.emplace_back(absl::StrCat(field, ".paths[", i, "]"), data.paths(i));
  }
  for (int i = 0; i < data.mix_size(); ++i) {
    for (auto& named :
         DataInputPaths(absl::StrCat(field, ".mix[", i, "].data"), data.mix(i).data())) {
      paths.push_back(std::move(named));
    }
  }
  if (!data.tokenizer().empty()) {
    paths.emplace_back(absl::StrCat(field, ".tokenizer"), data.tokenizer());
  }
  return paths;
}

}  // namespace pp::common

#include "coordinator/store.h"

#include <sqlite3.h>

#include <cstdint>
#include <limits>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/log.h"
#include "google/protobuf/util/json_util.h"

namespace pp::coordinator {

// A prepared statement that finalizes itself.
class JobStore::Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  absl::Status status() const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  sqlite3_stmt* get() { return stmt_; }
  void Bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  // Runs a statement that returns no rows.
  absl::Status Run() {
    if (int rc = sqlite3_step(stmt_); rc != SQLITE_DONE) {
      return absl::InternalError(absl::StrCat("sqlite step: ", sqlite3_errmsg(db_)));
    }
    return absl::OkStatus();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

namespace {

std::string Text(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return text ? std::string(reinterpret_cast<const char*>(text)) : std::string();
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = false;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string error = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open job store ", path, ": ", error));
  }
  std::unique_ptr<JobStore> store(new JobStore(db));
  sqlite3_busy_timeout(db, 5000);
  // WAL keeps each step's commit cheap; NORMAL sync is durable across process crashes.
  absl::Status status = store->Exec(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
      "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, name TEXT,"
      " spec_json TEXT NOT NULL, state TEXT NOT NULL, reason TEXT, step INTEGER, loss REAL,"
      " restarts INTEGER, created_unix REAL, updated_unix REAL, job_json TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS steps (job_id TEXT NOT NULL, step INTEGER NOT NULL, loss REAL,"
      " step_seconds REAL, tokens_per_second REAL, bubble_ratio REAL, time_unix REAL,"
      " PRIMARY KEY (job_id, step));"
      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
      "CREATE TABLE IF NOT EXISTS quarantine (id TEXT, seq INTEGER, job_json TEXT, error TEXT,"
      " quarantined_unix REAL);");
  if (status.ok()) status = store->UpgradeSteps();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("job store ", path, ": ", status.message()));
  }
  return store;
}

namespace {

// The columns of table steps after the first seven, in order, and their SQL types.
constexpr std::pair<const char*, const char*> kStepColumns[] = {
    {"attempt", "INTEGER"}, {"learning_rate", "REAL"}, {"has_eval", "INTEGER"},
    {"eval_loss", "REAL"},  {"skipped", "INTEGER"},    {"grad_norm", "REAL"},
};

constexpr char kStepSelect[] =
    "SELECT step, loss, step_seconds, tokens_per_second, bubble_ratio, time_unix, attempt,"
    " learning_rate, has_eval, eval_loss, skipped, grad_norm FROM steps";

pp::v1::JobStepRecord ReadStep(sqlite3_stmt* stmt) {
  pp::v1::JobStepRecord s;
  s.set_step(sqlite3_column_int(stmt, 0));
  s.set_loss(sqlite3_column_double(stmt, 1));
  s.set_step_seconds(sqlite3_column_double(stmt, 2));
  s.set_tokens_per_second(sqlite3_column_double(stmt, 3));
  s.set_bubble_ratio(sqlite3_column_double(stmt, 4));
  s.set_time_unix(sqlite3_column_double(stmt, 5));
  s.set_attempt(sqlite3_column_int(stmt, 6));
  s.set_learning_rate(sqlite3_column_double(stmt, 7));
  s.set_has_eval(sqlite3_column_int(stmt, 8) != 0);
  s.set_eval_loss(sqlite3_column_double(stmt, 9));
  s.set_skipped(sqlite3_column_int(stmt, 10) != 0);
  s.set_grad_norm(sqlite3_column_double(stmt, 11));
  return s;
}

}  // namespace

absl::Status JobStore::UpgradeSteps() {
  std::set<std::string> have;
  {
    Statement stmt(db_, "PRAGMA table_info(steps)");
    if (!stmt.status().ok()) return stmt.status();
    while (sqlite3_step(stmt.get()) == SQLITE_ROW) have.insert(Text(stmt.get(), 1));
  }
  for (const auto& [name, type] : kStepColumns) {
    if (have.count(name) > 0) continue;
    if (absl::Status s = Exec(
            absl::StrCat("ALTER TABLE steps ADD COLUMN ", name, " ", type, " NOT NULL DEFAULT 0"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::Status JobStore::Exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: ", message));
  }
  return absl::OkStatus();
}

absl::Status JobStore::Put(const pp::v1::Job& job) {
  Statement stmt(db_,
                 "INSERT OR REPLACE INTO jobs (id, seq, name, spec_json, state, reason, step, loss,"
                 " restarts, created_unix, updated_unix, job_json) VALUES (?1,"
                 " COALESCE((SELECT seq FROM jobs WHERE id = ?1),"
                 " (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs)), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
                 " ?10, ?11)");
  if (!stmt.status().ok()) return stmt.status();
  stmt.Bind(1, job.id());
  stmt.Bind(2, job.spec().name());
  stmt.Bind(3, ToJson(job.spec()));
  stmt.Bind(4, pp::v1::JobState_Name(job.state()));
  stmt.Bind(5, job.reason());
  stmt.Bind(6, static_cast<int64_t>(job.step()));
  stmt.Bind(7, job.loss());
  stmt.Bind(8, static_cast<int64_t>(job.restarts()));
  stmt.Bind(9, job.created_unix());
  stmt.Bind(10, job.updated_unix());
  stmt.Bind(11, ToJson(job));
  return stmt.Run();
}

absl::Status JobStore::Delete(const std::string& job_id) {
  return InTransaction({"DELETE FROM steps WHERE job_id = ?1", "DELETE FROM jobs WHERE id = ?1"},
                       [&job_id](Statement& stmt) { stmt.Bind(1, job_id); });
}

absl::Status JobStore::AddStep(const std::string& job_id, const pp::v1::JobStepRecord& step) {
  {
    Statement stmt(
        db_,
        "INSERT OR REPLACE INTO steps (job_id, step, loss, step_seconds,"
        " tokens_per_second, bubble_ratio, time_unix, attempt, learning_rate, has_eval,"
        " eval_loss, skipped, grad_norm) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!stmt.status().ok()) return stmt.status();
    stmt.Bind(1, job_id);
    stmt.Bind(2, static_cast<int64_t>(step.step()));
    stmt.Bind(3, step.loss());
    stmt.Bind(4, step.step_seconds());
    stmt.Bind(5, step.tokens_per_second());
    stmt.Bind(6, step.bubble_ratio());
    stmt.Bind(7, step.time_unix());
    stmt.Bind(8, static_cast<int64_t>(step.attempt()));
    stmt.Bind(9, step.learning_rate());
    stmt.Bind(10, static_cast<int64_t>(step.has_eval()));
    stmt.Bind(11, step.eval_loss());
    stmt.Bind(12, static_cast<int64_t>(step.skipped()));
    stmt.Bind(13, step.grad_norm());
    if (absl::Status s = stmt.Run(); !s.ok()) return s;
  }
  return ThinSteps(job_id);
}

absl::Status JobStore::ThinSteps(const std::string& job_id) {
  int64_t records = 0, newest = 0;
  {
    Statement count(db_, "SELECT COUNT(*), COALESCE(MAX(step), 0) FROM steps WHERE job_id = ?");
    if (!count.status().ok()) return count.status();
    count.Bind(1, job_id);
    if (sqlite3_step(count.get()) != SQLITE_ROW) {
      return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
    }
    records = sqlite3_column_int64(count.get(), 0);
    newest = sqlite3_column_int64(count.get(), 1);
  }
  if (records <= kMaxStepRecords) return absl::OkStatus();
  // Every other one of the thinnable older records, the oldest kept: one halving per overflow.
  Statement thin(db_,
                 "DELETE FROM steps WHERE job_id = ?1 AND step IN (SELECT step FROM (SELECT"
                 " step, ROW_NUMBER() OVER (ORDER BY step) AS n FROM steps WHERE job_id = ?1"
                 " AND step <= ?2 AND has_eval = 0 AND skipped = 0) WHERE n % 2 = 0)");
  if (!thin.status().ok()) return thin.status();
  thin.Bind(1, job_id);
  thin.Bind(2, newest - kKeptNewestSteps);
  return thin.Run();
}

absl::StatusOr<std::vector<pp::v1::Job>> JobStore::LoadJobs() {
  struct Damaged {
    int64_t rowid;
    std::string id;
    std::string error;
  };
  std::vector<pp::v1::Job> jobs;
  std::vector<Damaged> damaged;
  {
    Statement stmt(db_, "SELECT rowid, id, job_json FROM jobs ORDER BY seq");
    if (!stmt.status().ok()) return stmt.status();
    int rc;
    while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
      pp::v1::Job job;
      const std::string id = Text(stmt.get(), 1);
      auto parsed = google::protobuf::util::JsonStringToMessage(Text(stmt.get(), 2), &job);
      if (parsed.ok() && !id.empty() && job.id() == id) {
        jobs.push_back(std::move(job));
        continue;
      }
      damaged.push_back({sqlite3_column_int64(stmt.get(), 0), id,
                         parsed.ok()
                             ? absl::StrCat("its job's id is \"", job.id(), "\"")
                             : absl::StrReplaceAll(std::string(parsed.message()), {{"\n", " "}})});
    }
    if (rc != SQLITE_DONE) {
      return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
    }
  }
  for (const Damaged& d : damaged) {
    const std::string what =
        absl::StrCat("job store: the row of job \"", d.id, "\" does not decode (", d.error, ")");
    if (absl::Status moved = Quarantine(d.rowid, d.error); !moved.ok()) {
      Log(absl::StrCat(what, "; skipped, not quarantined: ", moved.message()));
    } else {
      Log(absl::StrCat(what, "; moved to table quarantine"));
    }
  }
  return jobs;
}

absl::Status JobStore::Quarantine(int64_t rowid, const std::string& error) {
  // One transaction: the row is in jobs or in quarantine, never in neither.
  return InTransaction(
      {"INSERT INTO quarantine (id, seq, job_json, error, quarantined_unix) SELECT id, seq,"
       " job_json, ?2, CAST(strftime('%s', 'now') AS REAL) FROM jobs WHERE rowid = ?1",
       "DELETE FROM jobs WHERE rowid = ?1"},
      [rowid, &error](Statement& stmt) {
        stmt.Bind(1, rowid);
        stmt.Bind(2, error);  // the DELETE has no ?2: sqlite ignores the binding (SQLITE_RANGE)
      });
}

absl::Status JobStore::InTransaction(std::initializer_list<const char*> statements,
                                     const std::function<void(Statement&)>& bind) {
  if (absl::Status begun = Exec("BEGIN IMMEDIATE"); !begun.ok()) return begun;
  absl::Status status;
  for (const char* sql : statements) {
    Statement stmt(db_, sql);
    status = stmt.status();
    if (!status.ok()) break;
    bind(stmt);
    if (status = stmt.Run(); !status.ok()) break;
  }
  if (!status.ok()) {
    (void)Exec("ROLLBACK");
    return status;
  }
  return Exec("COMMIT");
}

absl::StatusOr<std::vector<pp::v1::JobStepRecord>> JobStore::Steps(
    const std::string& job_id) const {
  return StepsFrom(job_id, 0, std::numeric_limits<int>::max());
}

absl::StatusOr<std::vector<pp::v1::JobStepRecord>> JobStore::StepsFrom(const std::string& job_id,
                                                                       int from_step,
                                                                       int limit) const {
  const std::string sql =
      absl::StrCat(kStepSelect, " WHERE job_id = ? AND step >= ?", " ORDER BY step LIMIT ?");
  Statement stmt(db_, sql.c_str());
  if (!stmt.status().ok()) return stmt.status();
  stmt.Bind(1, job_id);
  stmt.Bind(2, static_cast<int64_t>(from_step));
  stmt.Bind(3, static_cast<int64_t>(limit));
  std::vector<pp::v1::JobStepRecord> steps;
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) steps.push_back(ReadStep(stmt.get()));
  if (rc != SQLITE_DONE) return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
  return steps;
}

absl::StatusOr<int64_t> JobStore::ReserveSequence() {
  // One statement, so atomic. The seq columns count too, for stores written before table meta.
  Statement stmt(db_,
                 "INSERT OR REPLACE INTO meta (key, value) VALUES ('next_sequence', 1 + MAX("
                 " COALESCE((SELECT value FROM meta WHERE key = 'next_sequence'), 1),"
                 " (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs),"
                 " (SELECT COALESCE(MAX(seq), 0) + 1 FROM quarantine))) RETURNING value - 1");
  if (!stmt.status().ok()) return stmt.status();
  if (sqlite3_step(stmt.get()) != SQLITE_ROW) {
    return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
  }
  const int64_t sequence = sqlite3_column_int64(stmt.get(), 0);
  if (absl::Status done = stmt.Run(); !done.ok()) return done;  // the write completes here
  return sequence;
}

}  // namespace pp::coordinator

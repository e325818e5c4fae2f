// `ssmjit cache ls | stats | verify | clear`: the on-disk kernel cache (cache/DiskCache.h) listed,
// summarised, checked blob by blob and emptied from the command line.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "cache/DiskCache.h"
#include "cache/KernelCache.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

namespace fs = std::filesystem;

struct CacheOptions {
  std::string dir;  // empty: the process's cache, configured from the environment
  bool longList = false;
  bool removeBad = false;
};

// The cache a subcommand works on: --dir (with the environment's size limit), else the process's.
cache::DiskCache& openCache(const std::string& dir, std::unique_ptr<cache::DiskCache>& owned) {
  if (dir.empty()) return processDiskCache();
  cache::DiskCacheConfig config = cache::DiskCacheConfig::fromEnvironment();
  config.dir = dir;
  owned = std::make_unique<cache::DiskCache>(config);
  return *owned;
}

// ls, stats and verify need a directory to read; says why not on stderr.
bool readableOrSay(const cache::DiskCache& disk, const char* sub) {
  if (disk.readable()) return true;
  std::fprintf(stderr, "ssmjit cache %s: no disk cache to read (%s)\n", sub, diskCacheState(disk).c_str());
  return false;
}

std::string bytesText(uint64_t b) {
  if (b < 1024) return std::to_string(b) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = -1;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  return strf("%.1f %s", v, units[u]);
}

std::string localTime(int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  char buf[32];
  if (!::localtime_r(&t, &tm) || !std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm)) return "?";
  return buf;
}

std::string fileName(const std::string& path) { return fs::path(path).filename().string(); }

bool isBad(const cache::EntryInfo& e) { return !e.good(); }

std::string statusCell(const cache::EntryInfo& e) {
  if (e.status != cache::BlobStatus::Ok) return cache::blobStatusName(e.status);
  return e.keyMatchesName ? "ok" : "ok, misnamed";
}

int runLs(const CacheOptions& o) {
  std::unique_ptr<cache::DiskCache> owned;
  const cache::DiskCache& disk = openCache(o.dir, owned);
  if (!readableOrSay(disk, "ls")) return kExitFailure;
  std::vector<cache::EntryInfo> entries = disk.list();
  std::stable_sort(entries.begin(), entries.end(),
                   [](const cache::EntryInfo& a, const cache::EntryInfo& b) { return a.mtimeNs > b.mtimeNs; });
  std::vector<std::string> header{"file", "size", "last use", "kernel", "arch", "status"};
  if (o.longList) header.push_back("specialisation");
  Table table(header);
  uint64_t total = 0;
  for (const cache::EntryInfo& e : entries) {
    total += e.bytes;
    std::vector<std::string> row{fileName(e.path),
                                 bytesText(e.bytes),
                                 localTime(e.mtimeNs),
                                 e.kernel.empty() ? "-" : e.kernel,
                                 e.arch.empty() ? "-" : e.arch,
                                 statusCell(e)};
    if (o.longList) row.push_back(e.spec.empty() ? "-" : e.spec);
    table.add(row);
  }
  if (!table.empty()) table.printText();
  std::printf("%s, %s in %s\n", counted(entries.size(), "entry", "entries").c_str(), bytesText(total).c_str(),
              disk.config().dir.c_str());
  return kExitOk;
}

int runStats(const CacheOptions& o) {
  std::unique_ptr<cache::DiskCache> owned;
  const cache::DiskCache& disk = openCache(o.dir, owned);
  std::printf("directory  %s\n", disk.config().dir.empty() ? "(none)" : disk.config().dir.c_str());
  std::printf("state      %s\n", diskCacheState(disk).c_str());
  if (!disk.readable()) return kExitFailure;
  const std::vector<cache::EntryInfo> entries = disk.list();
  const size_t bad = static_cast<size_t>(std::count_if(entries.begin(), entries.end(), isBad));
  uint64_t total = 0;
  for (const cache::EntryInfo& e : entries) total += e.bytes;
  std::printf("entries    %zu%s\n", entries.size(),
              bad ? strf(" (%zu bad: see `ssmjit cache verify`)", bad).c_str() : "");
  const uint64_t max = disk.config().maxBytes;
  std::printf("size       %s of %s (%.1f%%; limit: SSMJIT_CACHE_MAX_BYTES)\n", bytesText(total).c_str(),
              bytesText(max).c_str(), max ? 100.0 * static_cast<double>(total) / static_cast<double>(max) : 0.0);
  return kExitOk;
}

int runVerify(const CacheOptions& o) {
  std::unique_ptr<cache::DiskCache> owned;
  cache::DiskCache& disk = openCache(o.dir, owned);
  if (!readableOrSay(disk, "verify")) return kExitFailure;
  const std::vector<cache::EntryInfo> entries = disk.list();
  size_t bad = 0;
  for (const cache::EntryInfo& e : entries) {
    if (!isBad(e)) continue;
    ++bad;
    if (e.status != cache::BlobStatus::Ok)
      std::printf("BAD %s: %s: %s (the key is unreadable, so whether the file name matches it is unknown)\n",
                  e.path.c_str(), cache::blobStatusName(e.status), e.detail.c_str());
    else
      std::printf("BAD %s: a sound blob whose file name is not the hash of its key (no lookup reaches it): %s\n",
                  e.path.c_str(), e.spec.c_str());
  }
  std::printf("verify: %s, %zu bad in %s\n", counted(entries.size(), "entry", "entries").c_str(), bad,
              disk.config().dir.c_str());
  if (!bad) return kExitOk;
  if (!o.removeBad) {
    std::printf("run `ssmjit cache verify --remove-bad` to delete them (the next use recompiles)\n");
    return kExitFailure;
  }
  const size_t removed = disk.removeBad();
  std::printf("removed %s\n", counted(removed, "bad entry", "bad entries").c_str());
  const std::vector<cache::EntryInfo> after = disk.list();
  const size_t left = static_cast<size_t>(std::count_if(after.begin(), after.end(), isBad));
  if (left) std::printf("%s left\n", counted(left, "bad entry is", "bad entries are").c_str());
  return left ? kExitFailure : kExitOk;
}

int runClear(const CacheOptions& o) {
  const std::string dir = o.dir.empty() ? cache::DiskCacheConfig::fromEnvironment().dir : o.dir;
  std::error_code ec;
  if (dir.empty() || !fs::exists(dir, ec)) {
    std::printf("removed 0 files: %s\n",
                dir.empty() ? "no cache directory is configured" : (dir + " does not exist").c_str());
    return kExitOk;
  }
  std::unique_ptr<cache::DiskCache> owned;
  cache::DiskCache& disk = openCache(o.dir, owned);
  const uint64_t bytes = disk.totalBytes();
  const size_t n = disk.clear();
  std::printf("removed %s (%s) from %s\n", counted(n, "file", "files").c_str(), bytesText(bytes).c_str(), dir.c_str());
  return kExitOk;
}

}  // namespace

CommandRun defineCacheCommand(CLI::App* app) {
  auto o = std::make_shared<CacheOptions>();
  app->require_subcommand(1);
  auto addDir = [&o](CLI::App* sub) {
    sub->add_option("--dir", o->dir, "Cache directory (default: the one the environment selects)");
  };
  CLI::App* ls = app->add_subcommand("ls", "List the entries, most recently used first");
  addDir(ls);
  ls->add_flag("--long,-l", o->longList, "Add each entry's specialisation (its canonical text)");
  CLI::App* stats = app->add_subcommand("stats", "Directory, state, entry count and size against the limit");
  addDir(stats);
  CLI::App* verify = app->add_subcommand(
      "verify", "Decode every blob and report the bad ones (exit 1 if any, unless --remove-bad deletes them)");
  addDir(verify);
  verify->add_flag("--remove-bad", o->removeBad, "Delete the bad entries (then exit 0)");
  CLI::App* clear = app->add_subcommand("clear", "Delete every entry (and stray temp files)");
  addDir(clear);
  return [o, ls, stats, verify, clear]() -> int {
    if (ls->parsed()) return runLs(*o);
    if (stats->parsed()) return runStats(*o);
    if (verify->parsed()) return runVerify(*o);
    if (clear->parsed()) return runClear(*o);
    throw UsageError("expected one of: ls, stats, verify, clear");
  };
}

}  // namespace ssmjit::tool

// Pre-warm manifests: both file forms and the one-entry file, round trips of records and documents,
// and every class of error with its message (source:line, the bad value, what was expected).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "cache/Manifest.h"
#include "ssmjit/error.h"

using namespace ssmjit;
using namespace ssmjit::cache;
using ::testing::HasSubstr;

namespace {

using Options = std::vector<std::pair<std::string, std::vector<std::string>>>;

// The message of the error parsing `text` gives; fails the test if it parses.
std::string parseError(const std::string& text, const std::string& source = "m.json") {
  try {
    const Manifest m = parseManifest(text, source);
    ADD_FAILURE() << "parsed into " << m.entries.size() << " entries: " << text.substr(0, 200);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument);
    return e.what();
  }
  return "";
}

// The message for one JSON Lines entry line (source m.jsonl, so messages start "m.jsonl:1: ").
std::string entryError(const std::string& line) { return parseError(line, "m.jsonl"); }

Specialization spec(const std::string& kernel, const std::string& arch,
                    std::vector<std::pair<std::string, int64_t>> values) {
  Specialization s;
  s.kernel = kernel;
  s.arch = arch;
  s.values = std::move(values);
  return s;
}

void expectSameEntries(const Manifest& want, const Manifest& got) {
  ASSERT_EQ(got.entries.size(), want.entries.size());
  for (size_t i = 0; i < want.entries.size(); ++i) {
    const ManifestEntry& w = want.entries[i];
    const ManifestEntry& g = got.entries[i];
    ASSERT_EQ(g.kind, w.kind) << i;
    if (w.kind == ManifestEntry::Kind::Specialization) {
      EXPECT_EQ(g.spec, w.spec) << i << ": " << g.spec.canonical() << " vs " << w.spec.canonical();
    } else {
      EXPECT_EQ(g.call.op, w.call.op) << i;
      EXPECT_EQ(g.call.archs, w.call.archs) << i;
      EXPECT_EQ(g.call.options, w.call.options) << i;
    }
  }
}

TEST(Manifest, DocumentForm) {
  const std::string text =
      "{\"ssmjit_manifest\": 1, \"entries\": [\n"
      "  {\"kernel\": \"selective_state_update\", \"arch\": \"sm_90a\",\n"
      "   \"bindings\": [[\"H\", 80], [\"P\", 64], [\"dtype:state\", 2], [\"off\", -3]]},\n"
      "\n"
      "  {\"op\": \"ssu-tokens\", \"archs\": [\"sm_90a\", \"sm_80\"], \"heads\": 80, \"tokens\": [2, 4, 8],\n"
      "   \"state-dtype\": [\"fp32\", \"bf16\"], \"no-z\": true, \"eps\": 0.5, \"big\": 1e3, \"z\": false},\n"
      "  {\"op\": \"ssu\", \"arch\": \"compute_80\", \"form\": \"mamba1\"}\n"
      "]}\n";
  const Manifest m = parseManifest(text, "m.json");
  ASSERT_EQ(m.entries.size(), 3u);

  const ManifestEntry& s = m.entries[0];
  EXPECT_EQ(s.kind, ManifestEntry::Kind::Specialization);
  EXPECT_EQ(s.line, 2);
  EXPECT_EQ(s.spec, spec("selective_state_update", "sm_90a", {{"H", 80}, {"P", 64}, {"dtype:state", 2}, {"off", -3}}));

  const ManifestEntry& o = m.entries[1];
  EXPECT_EQ(o.kind, ManifestEntry::Kind::OpCall);
  EXPECT_EQ(o.line, 5);
  EXPECT_EQ(o.call.op, "ssu-tokens");
  EXPECT_EQ(o.call.archs, (std::vector<std::string>{"sm_90a", "sm_80"}));
  // File order, numbers as their JSON text, booleans as "true"/"false".
  const Options want = {{"heads", {"80"}},
                        {"tokens", {"2", "4", "8"}},
                        {"state-dtype", {"fp32", "bf16"}},
                        {"no-z", {"true"}},
                        {"eps", {"0.5"}},
                        {"big", {"1000.0"}},
                        {"z", {"false"}}};
  EXPECT_EQ(o.call.options, want);

  const ManifestEntry& single = m.entries[2];
  EXPECT_EQ(single.line, 7);
  EXPECT_EQ(single.call.archs, std::vector<std::string>{"compute_80"});
  EXPECT_EQ(single.call.options, (Options{{"form", {"mamba1"}}}));
}

TEST(Manifest, DocumentEntryLinesFollowTheText) {
  // Strings holding brackets, commas and escaped quotes, and an option named "entries" inside an
  // entry, must not confuse the line count.
  const std::string text =
      "\n"
      "{\n"
      "  \"entries\": [ {\"op\": \"a,[{\\\"\", \"archs\": [\"sm_80\"],\n"
      "    \"entries\": [7,\n"
      "     8]}, {\"op\": \"b\",\n"
      "  \"archs\": [\"sm_80\"]},\n"
      "\n"
      "    {\"op\": \"c\", \"archs\": [\"sm_80\"], \"note\": \"}]\"}\n"
      "  ],\n"
      "  \"ssmjit_manifest\": 1\n"
      "}\n";
  const Manifest m = parseManifest(text, "m.json");
  ASSERT_EQ(m.entries.size(), 3u);
  EXPECT_EQ(m.entries[0].call.op, "a,[{\"");
  EXPECT_EQ(m.entries[0].call.options, (Options{{"entries", {"7", "8"}}}));
  EXPECT_EQ(m.entries[0].line, 3);
  EXPECT_EQ(m.entries[1].line, 5);
  EXPECT_EQ(m.entries[2].line, 8);
  EXPECT_EQ(m.entries[2].call.options, (Options{{"note", {"}]"}}}));
}

TEST(Manifest, JsonLinesWithBlankLines) {
  const std::string text =
      "{\"kernel\": \"k1\", \"arch\": \"sm_80\", \"bindings\": [[\"N\", 1]]}\n"
      "\n"
      "   \t\r\n"
      "{\"op\": \"ssu\", \"archs\": [\"sm_90a\"], \"batch\": 4}\r\n"
      "{\"kernel\": \"k2\", \"arch\": \"sm_100a\", \"bindings\": []}";  // no final newline
  const Manifest m = parseManifest(text, "rec.jsonl");
  ASSERT_EQ(m.entries.size(), 3u);
  EXPECT_EQ(m.entries[0].line, 1);
  EXPECT_EQ(m.entries[0].spec, spec("k1", "sm_80", {{"N", 1}}));
  EXPECT_EQ(m.entries[1].line, 4);
  EXPECT_EQ(m.entries[1].call.options, (Options{{"batch", {"4"}}}));
  EXPECT_EQ(m.entries[2].line, 5);
  EXPECT_EQ(m.entries[2].spec, spec("k2", "sm_100a", {}));
}

TEST(Manifest, SingleEntryFile) {
  const std::string text =
      "\n"
      "{\n"
      "  \"op\": \"ssu\",\n"
      "  \"archs\": [\"sm_90a\"],\n"
      "  \"heads\": 80\n"
      "}\n";
  const Manifest m = parseManifest(text, "one.json");
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0].kind, ManifestEntry::Kind::OpCall);
  EXPECT_EQ(m.entries[0].line, 2);
  EXPECT_EQ(m.entries[0].call.options, (Options{{"heads", {"80"}}}));
}

// An empty SSMJIT_RECORD file is a manifest with nothing in it, not an error.
TEST(Manifest, EmptyTextHasNoEntries) {
  EXPECT_TRUE(parseManifest("", "e.jsonl").entries.empty());
  EXPECT_TRUE(parseManifest("\n \n\t\n", "e.jsonl").entries.empty());
  EXPECT_TRUE(parseManifest("{\"ssmjit_manifest\": 1, \"entries\": []}", "e.json").entries.empty());
}

TEST(Manifest, RecordLinesRoundTrip) {
  const std::vector<Specialization> specs = {
      spec("selective_state_update", "sm_90a",
           {{"H", 80},
            {"dtype:state", 2},
            {"align:x", 16},
            {"meta:warps", 4},
            {"neg", -1},
            {"min", std::numeric_limits<int64_t>::min()},
            {"max", std::numeric_limits<int64_t>::max()}}),
      spec("odd \"name\" \\ with ünïcode", "compute_90a", {{"quote\"d", 0}}),
      spec("no_bindings", "sm_80", {}),
  };
  std::string file;
  for (const Specialization& s : specs) {
    const std::string line = specializationLine(s);
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.back(), '\n');
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
    const Manifest one = parseManifest(line, "rec.jsonl");
    ASSERT_EQ(one.entries.size(), 1u) << line;
    EXPECT_EQ(one.entries[0].spec, s) << line;
    file += line;
  }
  EXPECT_EQ(specializationLine(specs[2]), "{\"kernel\": \"no_bindings\", \"arch\": \"sm_80\", \"bindings\": []}\n");
  const Manifest all = parseManifest(file, "rec.jsonl");
  ASSERT_EQ(all.entries.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(all.entries[i].spec, specs[i]);
    EXPECT_EQ(all.entries[i].line, static_cast<int>(i) + 1);
  }
}

TEST(Manifest, DocumentRoundTrip) {
  Manifest m;
  ManifestEntry s;
  s.kind = ManifestEntry::Kind::Specialization;
  s.spec = spec("selective_state_update", "sm_90a", {{"H", 80}, {"P", 64}, {"big", int64_t{1} << 40}});
  m.entries.push_back(s);
  ManifestEntry o;
  o.kind = ManifestEntry::Kind::OpCall;
  o.call.op = "ssu-tokens";
  o.call.archs = {"sm_90a", "sm_80"};
  // Texts that look like JSON but are not its canonical form must come back as the same text.
  o.call.options = {{"heads", {"80"}},  {"tokens", {"2", "4", "8"}}, {"eps", {"0.5"}},
                    {"no-z", {"true"}}, {"flag", {"false"}},         {"padded", {"007"}},
                    {"sci", {"1e3"}},   {"neg-zero", {"-0"}},        {"mixed", {"1", "fp32", "true", "2.5"}},
                    {"empty", {""}},    {"quoted", {"a \"b\""}},     {"space", {" 5"}}};
  m.entries.push_back(o);
  ManifestEntry bare;
  bare.kind = ManifestEntry::Kind::OpCall;
  bare.call.op = "ssu";
  bare.call.archs = {"sm_100a"};
  m.entries.push_back(bare);

  const std::string doc = manifestDocument(m);
  EXPECT_EQ(doc.rfind("{\"ssmjit_manifest\": 1, \"entries\": [\n", 0), 0u) << doc;
  EXPECT_EQ(std::count(doc.begin(), doc.end(), '\n'), static_cast<long>(m.entries.size()) + 2) << doc;
  EXPECT_THAT(doc, HasSubstr("\"heads\": 80, \"tokens\": [2, 4, 8], \"eps\": 0.5, \"no-z\": true, \"flag\": false"));
  EXPECT_THAT(doc, HasSubstr("\"padded\": \"007\", \"sci\": \"1e3\", \"neg-zero\": \"-0\""));
  const Manifest back = parseManifest(doc, "doc.json");
  expectSameEntries(m, back);
  for (size_t i = 0; i < back.entries.size(); ++i) EXPECT_EQ(back.entries[i].line, static_cast<int>(i) + 2);
  EXPECT_EQ(manifestDocument(back), doc);
}

TEST(Manifest, InvalidJson) {
  EXPECT_THAT(entryError("{\"kernel\": \"k\", \"arch\": \"sm_80\", \"bindings\": []}\n\n{\"kernel\": }\n"),
              HasSubstr("m.jsonl:3: invalid JSON at column 12: syntax error"));
  // A document with a trailing comma: the error is the document's, at its line, not line 1's.
  EXPECT_THAT(parseError("{\"ssmjit_manifest\": 1, \"entries\": [\n"
                         "{\"kernel\": \"k\", \"arch\": \"sm_80\", \"bindings\": []},\n"
                         "]}\n"),
              HasSubstr("m.json:3: invalid JSON at column 1: syntax error while parsing value - unexpected ']'"));
  // nlohmann reports a number overflow without a position: the line still comes from JSON Lines.
  const std::string ok = "{\"op\": \"ssu\", \"archs\": [\"sm_80\"]}\n";
  EXPECT_THAT(entryError(ok + "{\"op\": \"ssu\", \"archs\": [\"sm_80\"], \"x\": 1e400}\n"),
              HasSubstr("m.jsonl:2: invalid JSON: number overflow"));
}

TEST(Manifest, DocumentErrors) {
  const std::string head = "{\"ssmjit_manifest\": 1, \"entries\": [\n";
  EXPECT_THAT(parseError("{\"ssmjit_manifest\": 2, \"entries\": []}"),
              HasSubstr("m.json:1: \"ssmjit_manifest\" is 2, expected 1"));
  EXPECT_THAT(parseError("{\"ssmjit_manifest\": \"1\", \"entries\": []}"),
              HasSubstr("m.json:1: \"ssmjit_manifest\" is \"1\", expected 1"));
  EXPECT_THAT(parseError("{\"entries\": []}"), HasSubstr("m.json:1: missing \"ssmjit_manifest\" (expected 1)"));
  EXPECT_THAT(parseError("\n{\"ssmjit_manifest\": 1, \"entries\": {}}"),
              HasSubstr("m.json:2: \"entries\" is {}, expected an array of entry objects"));
  EXPECT_THAT(parseError("{\"ssmjit_manifest\": 1, \"entries\": [], \"comment\": \"x\"}"),
              HasSubstr("m.json:1: unknown key \"comment\""));
  EXPECT_THAT(parseError("[1, 2]"), HasSubstr("m.json:1: got [1,2], expected a manifest"));
  EXPECT_THAT(parseError(head + "{\"op\": \"a\", \"archs\": [\"sm_80\"]},\n5\n]}"),
              HasSubstr("m.json: entry #2 (line 3): got 5, expected an entry object"));
  EXPECT_THAT(
      parseError(head + "{\"op\": \"a\", \"archs\": [\"sm_80\"]},\n\n {\"op\": \"b\", \"archs\": [\"sm80\"]}\n]}"),
      HasSubstr("m.json: entry #2 (line 4): \"archs\"[0] is \"sm80\", expected an arch like"));
  // A document followed by more text is a broken document, not JSON Lines.
  EXPECT_THAT(parseError("{\"ssmjit_manifest\": 1, \"entries\": []}\n{\"op\": \"a\", \"arch\": \"sm_80\"}\n"),
              HasSubstr("m.json:2: invalid JSON at column 1"));
}

TEST(Manifest, SpecializationErrors) {
  EXPECT_THAT(entryError("{\"kernel\": \"k\", \"arch\": \"sm_80\", \"bindngs\": []}"),
              HasSubstr("m.jsonl:1: unknown key \"bindngs\" (a specialisation entry has \"kernel\", \"arch\" and "
                        "\"bindings\")"));
  EXPECT_THAT(entryError("{\"kernel\": \"k\", \"bindings\": []}"), HasSubstr("m.jsonl:1: missing \"arch\""));
  EXPECT_THAT(entryError("{\"kernel\": \"k\", \"arch\": \"sm_80\"}"), HasSubstr("m.jsonl:1: missing \"bindings\""));
  EXPECT_THAT(entryError("{\"kernel\": \"\", \"arch\": \"sm_80\", \"bindings\": []}"),
              HasSubstr("m.jsonl:1: \"kernel\" is \"\", expected a non-empty string"));
  EXPECT_THAT(entryError("{\"kernel\": 7, \"arch\": \"sm_80\", \"bindings\": []}"),
              HasSubstr("\"kernel\" is 7, expected a non-empty string"));
  for (const char* arch : {"sm90", "sm_9", "sm_90b", "sm_1000", "SM_90", "sm_", "compute_9a", "sm_90aa"})
    EXPECT_THAT(entryError(std::string("{\"kernel\": \"k\", \"arch\": \"") + arch + "\", \"bindings\": []}"),
                HasSubstr(std::string("m.jsonl:1: \"arch\" is \"") + arch +
                          "\", expected an arch like \"sm_90a\" (sm_XX or compute_XX"));
  EXPECT_THAT(entryError("{\"kernel\": \"k\", \"arch\": 90, \"bindings\": []}"), HasSubstr("\"arch\" is 90"));

  const std::string pre = "{\"kernel\": \"k\", \"arch\": \"sm_90a\", \"bindings\": ";
  // Each "bindings" value and what the error says about it.
  const std::pair<const char*, const char*> badBindings[] = {
      {"{}", "\"bindings\" is {}, expected an array of [name, integer] pairs"},
      {"[[\"H\", 80], [\"P\"]]", "m.jsonl:1: \"bindings\"[1] is [\"P\"], expected a [name, integer] pair"},
      {"[[\"H\", 80], [\"P\", 64], [\"N\", 1.5]]", "m.jsonl:1: \"bindings\"[2][1] is 1.5, expected an integer"},
      {"[[\"H\", true]]", "\"bindings\"[0][1] is true, expected an integer"},
      {"[[\"H\", \"80\"]]", "\"bindings\"[0][1] is \"80\", expected an integer"},
      {"[[\"H\", 9223372036854775808]]",
       "\"bindings\"[0][1] is 9223372036854775808, expected an integer in the int64 range"},
      {"[[\"H\", -9223372036854775809]]", "\"bindings\"[0][1] is -9.223372036854776e+18, expected an integer"},
      {"[[5, 1]]", "\"bindings\"[0][0] is 5, expected a binding name"},
      {"[[\"\", 1]]", "\"bindings\"[0][0] is \"\", expected a binding name"},
      {"[[\"a=b\", 1]]", "\"bindings\"[0][0] is \"a=b\", expected a binding name without ';' or '='"},
      {"[[\"H\", 1], [\"a;b\", 1]]", "\"bindings\"[1][0] is \"a;b\""},
      {"[[\"H\", 80], [\"P\", 64], [\"H\", 64]]",
       "m.jsonl:1: \"bindings\"[2] binds \"H\" again (first at \"bindings\"[0])"}};
  for (const auto& [bindings, message] : badBindings)
    EXPECT_THAT(entryError(pre + bindings + "}"), HasSubstr(message)) << bindings;

  const Manifest limits = parseManifest(pre + "[[\"a\", 9223372036854775807], [\"b\", -9223372036854775808]]}", "x");
  EXPECT_EQ(limits.entries.at(0).spec.values,
            (std::vector<std::pair<std::string, int64_t>>{{"a", std::numeric_limits<int64_t>::max()},
                                                          {"b", std::numeric_limits<int64_t>::min()}}));
}

TEST(Manifest, OpCallErrors) {
  EXPECT_THAT(entryError("{\"kernel\": \"k\", \"op\": \"ssu\", \"archs\": [\"sm_80\"]}"),
              HasSubstr("m.jsonl:1: both \"kernel\" and \"op\""));
  // On a line of its own, a value that is no entry is a file that is no manifest; in JSON Lines, a bad line.
  EXPECT_THAT(entryError("{\"kernal\": \"k\"}"), HasSubstr("m.jsonl:1: got {\"kernal\":\"k\"}, expected a manifest"));
  const std::string ok = "{\"op\": \"ssu\", \"archs\": [\"sm_80\"]}\n";
  EXPECT_THAT(entryError(ok + "{\"kernal\": \"k\"}"),
              HasSubstr("m.jsonl:2: got {\"kernal\":\"k\"}, expected an entry object ({\"kernel\": ...} or "
                        "{\"op\": ...})"));
  EXPECT_THAT(entryError(ok + "[1]"), HasSubstr("m.jsonl:2: got [1], expected an entry object"));
  EXPECT_THAT(entryError("{\"op\": \"\", \"archs\": [\"sm_80\"]}"),
              HasSubstr("\"op\" is \"\", expected a non-empty string"));
  EXPECT_THAT(entryError("{\"op\": \"ssu\"}"), HasSubstr("m.jsonl:1: missing \"archs\" (expected a non-empty array"));
  EXPECT_THAT(entryError("{\"op\": \"ssu\", \"archs\": []}"),
              HasSubstr("\"archs\" is [], expected a non-empty array of archs"));
  EXPECT_THAT(entryError("{\"op\": \"ssu\", \"archs\": \"sm_80\"}"), HasSubstr("\"archs\" is \"sm_80\", expected a"));
  EXPECT_THAT(entryError("{\"op\": \"ssu\", \"archs\": [\"sm_80\", \"sm_8\"]}"),
              HasSubstr("\"archs\"[1] is \"sm_8\", expected an arch like"));
  EXPECT_THAT(entryError("{\"op\": \"ssu\", \"arch\": \"sm_80\", \"archs\": [\"sm_80\"]}"),
              HasSubstr("both \"arch\" and \"archs\""));
  const std::string pre = "{\"op\": \"ssu\", \"archs\": [\"sm_80\"], ";
  // Each option and what the error says about it.
  const std::pair<const char*, const char*> badOptions[] = {
      {"\"heads\": null",
       "m.jsonl:1: option \"heads\" is null, expected a number, string, boolean or a non-empty array"},
      {"\"heads\": {\"a\": 1}", "option \"heads\" is {\"a\":1}, expected"},
      {"\"tokens\": []", "option \"tokens\" is [], expected"},
      {"\"tokens\": [2, [4, 8]]", "option \"tokens\"[1] is [4,8], expected a number, string or boolean"},
      {"\"tokens\": [2, null]", "option \"tokens\"[1] is null"},
      {"\"--heads\": 80", "option name \"--heads\" is not one"},
      {"\"heads=80\": 1", "option name \"heads=80\" is not one"},
      {"\"\": 1", "option name \"\" is not one"}};
  for (const auto& [option, message] : badOptions)
    EXPECT_THAT(entryError(pre + option + "}"), HasSubstr(message)) << option;
}

TEST(Manifest, DuplicateKeysAreErrors) {
  EXPECT_THAT(entryError("{\"op\": \"ssu\", \"archs\": [\"sm_80\"], \"heads\": 80, \"heads\": 64}"),
              HasSubstr("m.jsonl:1: duplicate key \"heads\""));
  // The same key written with an escape is the same key.
  EXPECT_THAT(entryError("{\"op\": \"ssu\", \"archs\": [\"sm_80\"], \"heads\": 80, \"h\\u0065ads\": 64}"),
              HasSubstr("m.jsonl:1: duplicate key \"heads\""));
  EXPECT_THAT(parseError("{\"ssmjit_manifest\": 1, \"entries\": [\n"
                         "{\"op\": \"a\", \"archs\": [\"sm_80\"]},\n"
                         "{\"op\": \"b\", \"archs\": [\"sm_80\"],\n"
                         "  \"op\": \"c\"}\n"
                         "]}"),
              HasSubstr("m.json:4: duplicate key \"op\""));
  // Equal keys in different objects are fine.
  EXPECT_EQ(parseManifest("{\"ssmjit_manifest\": 1, \"entries\": [{\"op\": \"a\", \"arch\": \"sm_80\"}, "
                          "{\"op\": \"b\", \"arch\": \"sm_80\"}]}",
                          "m")
                .entries.size(),
            2u);
}

// nlohmann stops at a NUL as if the input ended there: without the check, trailing junk would pass.
TEST(Manifest, NulBytesAreRejected) {
  const std::string entry = "{\"op\": \"ssu\", \"archs\": [\"sm_80\"]}";
  EXPECT_THAT(parseError(entry + std::string("\0junk", 5)), HasSubstr("m.json:1: a NUL byte"));
  EXPECT_THAT(parseError(entry + "\n" + entry + std::string("\0", 1) + "\n"), HasSubstr("m.json:2: a NUL byte"));
}

TEST(Manifest, DeepNestingIsRejectedCleanly) {
  EXPECT_THAT(parseError(std::string(100000, '[')), HasSubstr("m.json:1: nested deeper than 64 levels"));
  EXPECT_THAT(parseError(std::string(5000, '{') + std::string(5000, '}')), HasSubstr("nested deeper than 64"));
  const std::string ok = "{\"op\": \"ssu\", \"archs\": [\"sm_80\"]}\n";
  EXPECT_THAT(entryError(ok + ok + "{\"op\": \"ssu\", \"archs\": " + std::string(70, '[') + "\n"),
              HasSubstr("m.jsonl:3: nested deeper than 64 levels"));
  // Brackets inside strings are text, not nesting.
  const std::string brackets(200, '[');
  const Manifest m = parseManifest("{\"op\": \"ssu\", \"archs\": [\"sm_80\"], \"x\": \"" + brackets + "\"}", "m");
  EXPECT_EQ(m.entries.at(0).call.options, (Options{{"x", {brackets}}}));
}

}  // namespace

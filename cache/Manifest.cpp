// Pre-warm manifests (cache/Manifest.h): parsing either form with messages that name the place, the
// value and what was expected, and writing records and documents that parse back equal.
#include "cache/Manifest.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "ssmjit/error.h"

namespace ssmjit::cache {
namespace {

// Ordered: op options keep their file order.
using Json = nlohmann::ordered_json;

// Far above any manifest (a document's binding pairs sit at depth 5), far below a stack overflow in the
// recursive code that touches parsed values (dump() in messages).
constexpr int kMaxDepth = 64;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(Error::Kind::InvalidArgument, where + ": " + what);
}

std::string at(const std::string& source, int line) { return source + ":" + std::to_string(line); }

std::string dumped(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string jsonString(const std::string& s) { return dumped(Json(s)); }

// A value as a message shows it: compact JSON, cut short.
std::string shown(const Json& v) {
  constexpr size_t kMax = 60;
  std::string s = dumped(v);
  return s.size() > kMax ? s.substr(0, kMax - 3) + "..." : s;
}

// Rejects, before nlohmann sees the text, bracket nesting beyond kMaxDepth and NUL bytes (never valid
// JSON, but nlohmann takes one for the end of the input and would accept "{...}\0anything"). Strings
// are skipped; a raw newline ends one (JSON strings cannot hold one, so the parser stops there too),
// which keeps a stray quote on one JSON Lines line from hiding the brackets of the next.
void checkText(const std::string& text, const std::string& source) {
  int depth = 0, line = 1;
  bool inString = false, escaped = false;
  for (const char c : text) {
    if (c == '\0') {
      fail(at(source, line), "a NUL byte, which JSON text cannot hold");
    } else if (c == '\n') {
      ++line;
      inString = escaped = false;
    } else if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) fail(at(source, line), "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

struct JsonError {
  int line = 0;  // 0 (and column 0): nlohmann gave no position, as for a number overflow
  size_t column = 0;
  std::string what;
};

// nlohmann's message without its "[json.exception...] parse error at line L, column C: " prefix:
// the place is given in the manifest's own terms.
std::string jsonMessage(const std::string& w) {
  const size_t k = w.find("] ");
  std::string s = k == std::string::npos ? w : w.substr(k + 2);
  if (s.rfind("parse error", 0) == 0) {
    const size_t c = s.find(": ");
    if (c != std::string::npos) s = s.substr(c + 2);
  }
  return s;
}

bool parseJson(const std::string& text, int firstLine, Json* out, JsonError* err) {
  try {
    *out = Json::parse(text);
    return true;
  } catch (const Json::parse_error& e) {
    // e.byte is the 1-based offset of the character that failed.
    const size_t end = std::min<size_t>(e.byte ? e.byte - 1 : 0, text.size());
    size_t lineStart = 0;
    err->line = firstLine;
    for (size_t i = 0; i < end; ++i)
      if (text[i] == '\n') {
        ++err->line;
        lineStart = i + 1;
      }
    err->column = end - lineStart + 1;
    err->what = jsonMessage(e.what());
  } catch (const Json::exception& e) {
    err->what = jsonMessage(e.what());
  }
  return false;
}

[[noreturn]] void failJson(const JsonError& err, const std::string& source) {
  const std::string what =
      "invalid JSON" + (err.column ? " at column " + std::to_string(err.column) : std::string()) + ": " + err.what;
  fail(err.line ? at(source, err.line) : source, what);
}

// Where things are in a text nlohmann accepted: the line of the value, and the lines of the elements
// of a top-level "entries" array. Also rejects duplicate keys, which nlohmann would silently collapse
// into one (the last): a repeated option is a mistake, not an override.
struct Layout {
  int valueLine = 0;
  std::vector<int> entryLines;
};

bool isDelimiter(char c) {
  switch (c) {
    case ' ':
    case '\t':
    case '\r':
    case '\n':
    case ',':
    case ':':
    case '[':
    case ']':
    case '{':
    case '}':
    case '"':
      return true;
    default:
      return false;
  }
}

Layout scanLayout(const std::string& text, int firstLine, const std::string& source) {
  struct Frame {
    bool object;
    bool entries;    // the top-level "entries" array
    bool expectKey;  // an object's next string is a key
    std::set<std::string> keys;
  };
  std::vector<Frame> frames;
  Layout out;
  int line = firstLine;
  bool nextIsEntries = false;  // the value after the top-level key "entries"
  auto valueStart = [&] {
    if (frames.empty()) {
      if (!out.valueLine) out.valueLine = line;
    } else if (frames.back().entries) {
      out.entryLines.push_back(line);
    }
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == ':') {
      // nothing to track
    } else if (c == ',') {
      if (!frames.empty() && frames.back().object) frames.back().expectKey = true;
    } else if (c == '}' || c == ']') {
      if (!frames.empty()) frames.pop_back();
    } else if (c == '"') {
      size_t j = i + 1;
      bool escapes = false;
      for (; j < text.size() && text[j] != '"'; ++j)
        if (text[j] == '\\') {
          escapes = true;
          ++j;
        }
      if (!frames.empty() && frames.back().object && frames.back().expectKey) {
        std::string key = text.substr(i + 1, j - i - 1);
        if (escapes) key = Json::parse(text.substr(i, j - i + 1)).get<std::string>();
        Frame& f = frames.back();
        if (!f.keys.insert(key).second) fail(at(source, line), "duplicate key " + jsonString(key));
        f.expectKey = false;
        nextIsEntries = frames.size() == 1 && key == "entries";
      } else {
        valueStart();
        nextIsEntries = false;
      }
      i = j;
    } else {
      valueStart();
      if (c == '{' || c == '[') {
        frames.push_back({c == '{', c == '[' && nextIsEntries, c == '{', {}});
      } else {
        while (i + 1 < text.size() && !isDelimiter(text[i + 1])) ++i;  // the rest of a number or literal
      }
      nextIsEntries = false;
    }
  }
  return out;
}

// sm_XX or compute_XX (two or three digits), optionally with a trailing 'a'.
bool validArch(const std::string& s) {
  const size_t p = s.rfind("sm_", 0) == 0 ? 3 : s.rfind("compute_", 0) == 0 ? 8 : 0;
  if (p == 0) return false;
  const size_t end = s.size() - (s.back() == 'a' ? 1 : 0);
  if (end < p + 2 || end > p + 3) return false;
  for (size_t i = p; i < end; ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

const char* const kArchExpected = "expected an arch like \"sm_90a\" (sm_XX or compute_XX, optionally ending in 'a')";

std::string archValue(const Json& v, const std::string& what, const std::string& where) {
  if (!v.is_string() || !validArch(v.get<std::string>())) fail(where, what + " is " + shown(v) + ", " + kArchExpected);
  return v.get<std::string>();
}

const Json& member(const Json& obj, const char* key, const std::string& where, const std::string& expected) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(where, "missing " + jsonString(key) + " (expected " + expected + ")");
  return *it;
}

std::string nonEmptyString(const Json& obj, const char* key, const std::string& where) {
  const Json& v = member(obj, key, where, "a non-empty string");
  if (!v.is_string() || v.get<std::string>().empty())
    fail(where, jsonString(key) + " is " + shown(v) + ", expected a non-empty string");
  return v.get<std::string>();
}

Specialization specializationEntry(const Json& e, const std::string& where) {
  for (const auto& kv : e.items())
    if (kv.key() != "kernel" && kv.key() != "arch" && kv.key() != "bindings")
      fail(where, "unknown key " + jsonString(kv.key()) +
                      " (a specialisation entry has \"kernel\", \"arch\" and \"bindings\")");
  Specialization spec;
  spec.kernel = nonEmptyString(e, "kernel", where);
  spec.arch = archValue(member(e, "arch", where, "a string like \"sm_90a\""), "\"arch\"", where);
  const char* const pairs = "an array of [name, integer] pairs";
  const Json& b = member(e, "bindings", where, pairs);
  if (!b.is_array()) fail(where, "\"bindings\" is " + shown(b) + ", expected " + pairs);
  std::unordered_map<std::string, size_t> firstAt;
  for (size_t i = 0; i < b.size(); ++i) {
    const Json& pair = b[i];
    const std::string path = "\"bindings\"[" + std::to_string(i) + "]";
    if (!pair.is_array() || pair.size() != 2)
      fail(where, path + " is " + shown(pair) + ", expected a [name, integer] pair");
    const Json& name = pair[0];
    const Json& value = pair[1];
    if (!name.is_string() || name.get<std::string>().empty())
      fail(where, path + "[0] is " + shown(name) + ", expected a binding name (a non-empty string)");
    const std::string n = name.get<std::string>();
    // ';' and '=' delimit Specialization::canonical(), the disk-cache key.
    if (n.find_first_of(";=") != std::string::npos)
      fail(where, path + "[0] is " + shown(name) + ", expected a binding name without ';' or '='");
    if (!value.is_number_integer()) fail(where, path + "[1] is " + shown(value) + ", expected an integer");
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})
      fail(where, path + "[1] is " + shown(value) + ", expected an integer in the int64 range");
    const auto [it, fresh] = firstAt.emplace(n, i);
    if (!fresh)
      fail(where,
           path + " binds " + jsonString(n) + " again (first at \"bindings\"[" + std::to_string(it->second) + "])");
    spec.values.emplace_back(n, value.get<int64_t>());
  }
  return spec;
}

// Options become "--name=value" arguments of the tool: a name must be one.
bool validOptionName(const std::string& s) {
  if (s.empty() || s[0] == '-') return false;
  for (const char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

bool scalarText(const Json& v, std::string* out) {
  if (v.is_string())
    *out = v.get<std::string>();
  else if (v.is_boolean())
    *out = v.get<bool>() ? "true" : "false";
  else if (v.is_number())
    *out = dumped(v);
  else
    return false;
  return true;
}

OpCall opCallEntry(const Json& e, const std::string& where) {
  OpCall call;
  call.op = nonEmptyString(e, "op", where);
  const auto arch = e.find("arch");
  const auto archs = e.find("archs");
  if (arch != e.end() && archs != e.end()) fail(where, "both \"arch\" and \"archs\" (give one; \"archs\" for several)");
  const char* const archList = "a non-empty array of archs like [\"sm_90a\", \"sm_80\"]";
  if (arch != e.end()) {
    call.archs.push_back(archValue(*arch, "\"arch\"", where));
  } else {
    const Json& a = member(e, "archs", where, std::string(archList) + ", or \"arch\"");
    if (!a.is_array() || a.empty()) fail(where, "\"archs\" is " + shown(a) + ", expected " + archList);
    for (size_t i = 0; i < a.size(); ++i)
      call.archs.push_back(archValue(a[i], "\"archs\"[" + std::to_string(i) + "]", where));
  }
  for (const auto& kv : e.items()) {
    const std::string& name = kv.key();
    if (name == "op" || name == "arch" || name == "archs") continue;
    if (!validOptionName(name))
      fail(where, "option name " + jsonString(name) +
                      " is not one (expected letters, digits, '-' and '_', like \"state-dtype\")");
    const Json& v = kv.value();
    const std::string option = "option " + jsonString(name);
    std::vector<std::string> values;
    std::string text;
    if (scalarText(v, &text)) {
      values.push_back(text);
    } else if (v.is_array() && !v.empty()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (!scalarText(v[i], &text))
          fail(where,
               option + "[" + std::to_string(i) + "] is " + shown(v[i]) + ", expected a number, string or boolean");
        values.push_back(text);
      }
    } else {
      fail(where, option + " is " + shown(v) + ", expected a number, string, boolean or a non-empty array of them");
    }
    call.options.emplace_back(name, std::move(values));
  }
  return call;
}

ManifestEntry entry(const Json& e, const std::string& where, int line) {
  const char* const expected = "an entry object ({\"kernel\": ...} or {\"op\": ...})";
  if (!e.is_object()) fail(where, "got " + shown(e) + ", expected " + expected);
  const bool isSpec = e.contains("kernel");
  const bool isOp = e.contains("op");
  if (isSpec && isOp) fail(where, "both \"kernel\" and \"op\" (an entry is a specialisation or an op call)");
  if (!isSpec && !isOp) fail(where, "got " + shown(e) + ", expected " + expected);
  ManifestEntry m;
  m.line = line;
  if (isSpec) {
    m.kind = ManifestEntry::Kind::Specialization;
    m.spec = specializationEntry(e, where);
  } else {
    m.kind = ManifestEntry::Kind::OpCall;
    m.call = opCallEntry(e, where);
  }
  return m;
}

Manifest document(const Json& doc, const Layout& layout, const std::string& source) {
  const std::string where = at(source, layout.valueLine);
  for (const auto& kv : doc.items())
    if (kv.key() != "ssmjit_manifest" && kv.key() != "entries")
      fail(where,
           "unknown key " + jsonString(kv.key()) + " (a manifest document has \"ssmjit_manifest\" and \"entries\")");
  const std::string version = std::to_string(kManifestVersion);
  const Json& v = member(doc, "ssmjit_manifest", where, version);
  if (!v.is_number_integer() || v != kManifestVersion)
    fail(where,
         "\"ssmjit_manifest\" is " + shown(v) + ", expected " + version + " (the manifest format this build reads)");
  const Json& entries = doc.at("entries");
  if (!entries.is_array()) fail(where, "\"entries\" is " + shown(entries) + ", expected an array of entry objects");
  Manifest m;
  for (size_t i = 0; i < entries.size(); ++i) {
    // at(): the scanner finds one line per element; a mismatch is a bug to surface, not to hide.
    const int line = layout.entryLines.at(i);
    m.entries.push_back(
        entry(entries[i], source + ": entry #" + std::to_string(i + 1) + " (line " + std::to_string(line) + ")", line));
  }
  return m;
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// Written bare only when nlohmann writes that very text for it, so that parsing gives it back.
bool writesAsNumber(const std::string& s) {
  if (s.empty() || !(s[0] == '-' || std::isdigit(static_cast<unsigned char>(s[0])))) return false;
  try {
    const Json v = Json::parse(s);
    return v.is_number() && dumped(v) == s;
  } catch (const Json::exception&) {
    return false;
  }
}

std::string optionValue(const std::string& v) {
  return v == "true" || v == "false" || writesAsNumber(v) ? v : jsonString(v);
}

std::string specializationObject(const Specialization& spec) {
  std::string out =
      "{\"kernel\": " + jsonString(spec.kernel) + ", \"arch\": " + jsonString(spec.arch) + ", \"bindings\": [";
  for (size_t i = 0; i < spec.values.size(); ++i)
    out += (i ? ", [" : "[") + jsonString(spec.values[i].first) + ", " + std::to_string(spec.values[i].second) + "]";
  return out + "]}";
}

std::string opCallObject(const OpCall& call) {
  std::string out = "{\"op\": " + jsonString(call.op) + ", \"archs\": [";
  for (size_t i = 0; i < call.archs.size(); ++i) out += (i ? ", " : "") + jsonString(call.archs[i]);
  out += "]";
  for (const auto& [name, values] : call.options) {
    out += ", " + jsonString(name) + ": ";
    if (values.size() == 1) {
      out += optionValue(values[0]);
      continue;
    }
    out += "[";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + optionValue(values[i]);
    out += "]";
  }
  return out + "}";
}

}  // namespace

Manifest parseManifest(const std::string& text, const std::string& source) {
  checkText(text, source);
  Json doc;
  JsonError docError;
  if (parseJson(text, 1, &doc, &docError)) {
    const Layout layout = scanLayout(text, 1, source);
    if (doc.is_object() && doc.contains("entries")) return document(doc, layout, source);
    if (!doc.is_object() || !(doc.contains("kernel") || doc.contains("op")))
      fail(at(source, layout.valueLine),
           "got " + shown(doc) + ", expected a manifest {\"ssmjit_manifest\": " + std::to_string(kManifestVersion) +
               ", \"entries\": [...]}, one entry object or JSON Lines");
    Manifest m;
    m.entries.push_back(entry(doc, at(source, layout.valueLine), layout.valueLine));
    return m;
  }

  // JSON Lines, unless the first line is not a value on its own, or a line holds a document: then the
  // text was meant as one document, and the error is the document's.
  Manifest m;
  bool first = true;
  int lineNo = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++lineNo;
    if (blank(line)) continue;
    Json v;
    JsonError err;
    if (!parseJson(line, lineNo, &v, &err)) {
      if (first && docError.line) failJson(docError, source);
      if (!err.line) err.line = lineNo;
      failJson(err, source);
    }
    first = false;
    scanLayout(line, lineNo, source);
    if (v.is_object() && v.contains("entries")) failJson(docError, source);
    m.entries.push_back(entry(v, at(source, lineNo), lineNo));
  }
  return m;
}

std::string specializationLine(const Specialization& spec) { return specializationObject(spec) + "\n"; }

std::string manifestDocument(const Manifest& m) {
  std::string out = "{\"ssmjit_manifest\": " + std::to_string(kManifestVersion) + ", \"entries\": [\n";
  for (size_t i = 0; i < m.entries.size(); ++i) {
    const ManifestEntry& e = m.entries[i];
    out += e.kind == ManifestEntry::Kind::Specialization ? specializationObject(e.spec) : opCallObject(e.call);
    out += i + 1 < m.entries.size() ? ",\n" : "\n";
  }
  return out + "]}\n";
}

}  // namespace ssmjit::cache

// libFuzzer target for the manifest parser: any text parses or throws ssmjit::Error naming the
// source (nothing else, no crash), and what parses survives manifestDocument and specializationLine.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cache/Manifest.h"
#include "ssmjit/error.h"

using namespace ssmjit;
using namespace ssmjit::cache;

namespace {

[[noreturn]] void bug(const std::string& what, const std::string& text) {
  std::fprintf(stderr, "%s\n--- text ---\n%s\n", what.c_str(), text.c_str());
  std::abort();
}

bool sameEntry(const ManifestEntry& a, const ManifestEntry& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == ManifestEntry::Kind::Specialization) return a.spec == b.spec;
  return a.call.op == b.call.op && a.call.archs == b.call.archs && a.call.options == b.call.options;
}

// Any exception but ssmjit::Error escapes and libFuzzer reports it.
Manifest parse(const std::string& text, const std::string& source, const std::string& original) {
  try {
    return parseManifest(text, source);
  } catch (const Error& e) {
    bug(source + " does not parse back: " + e.what(), original);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Manifest m;
  try {
    m = parseManifest(text, "fuzz.json");
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (e.kind() != Error::Kind::InvalidArgument || msg.rfind("fuzz.json", 0) != 0)
      bug("error of the wrong kind or without its source: " + msg, text);
    return 0;
  }
  const std::string doc = manifestDocument(m);
  const Manifest back = parse(doc, "manifestDocument", text);
  if (back.entries.size() != m.entries.size()) bug("manifestDocument lost or added entries:\n" + doc, text);
  for (size_t i = 0; i < m.entries.size(); ++i) {
    if (!sameEntry(m.entries[i], back.entries[i]))
      bug("entry #" + std::to_string(i + 1) + " differs after manifestDocument:\n" + doc, text);
    if (m.entries[i].kind != ManifestEntry::Kind::Specialization) continue;
    const std::string line = specializationLine(m.entries[i].spec);
    const Manifest one = parse(line, "specializationLine", text);
    if (one.entries.size() != 1 || !sameEntry(one.entries[0], m.entries[i]))
      bug("specializationLine does not read back:\n" + line, text);
  }
  if (manifestDocument(back) != doc) bug("manifestDocument is not stable:\n" + doc, text);
  return 0;
}

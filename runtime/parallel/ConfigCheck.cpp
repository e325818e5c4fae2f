// The ranks' configuration check (ConfigCheck.h).
#include "runtime/parallel/ConfigCheck.h"

#include <map>

#include "ssmjit/error.h"

namespace ssmjit::parallel {
namespace {

std::map<std::string, std::string> decode(const std::vector<char>& block) {
  std::map<std::string, std::string> kv;
  std::string text(block.begin(), block.end());
  text = text.substr(0, text.find('\0'));
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    const std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return kv;
}

}  // namespace

std::vector<char> encodeConfig(const ConfigPairs& pairs) {
  std::string text;
  for (const auto& [k, v] : pairs) {
    if (k.empty() || k.find_first_of(std::string("=\n\0", 3)) != std::string::npos ||
        v.find_first_of(std::string("\n\0", 2)) != std::string::npos)
      throw Error(Error::Kind::InvalidArgument, "config entry '" + k + "=" + v +
                                                    "' is not a key=value pair (a non-empty key without '=', "
                                                    "newlines or NUL bytes in either)");
    text += k + "=" + v + "\n";
  }
  if (text.size() >= kConfigBlockBytes)
    throw Error(Error::Kind::InvalidArgument, "config is " + std::to_string(text.size()) + " bytes, expected under " +
                                                  std::to_string(kConfigBlockBytes));
  std::vector<char> block(kConfigBlockBytes, '\0');
  std::copy(text.begin(), text.end(), block.begin());
  return block;
}

std::string configMismatch(const std::vector<std::vector<char>>& blocks) {
  std::vector<std::map<std::string, std::string>> ranks;
  std::map<std::string, bool> keys;
  for (const auto& b : blocks) {
    ranks.push_back(decode(b));
    for (const auto& kv : ranks.back()) keys[kv.first] = true;
  }
  auto show = [](const std::map<std::string, std::string>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? std::string("no value") : it->second;
  };
  std::string out;
  for (const auto& [k, unused] : keys) {
    const std::string first = show(ranks[0], k);
    for (size_t r = 1; r < ranks.size(); ++r) {
      const std::string got = show(ranks[r], k);
      if (got == first) continue;
      out += (out.empty() ? "" : "\n") + k + ": rank " + std::to_string(r) + " has " + got + ", rank 0 has " + first;
      break;
    }
  }
  return out;
}

}  // namespace ssmjit::parallel

// Speculative decoding's host-side pieces (mamba2_model.h): which tokens a verify keeps, and a
// drafter that looks the sequence's own recent tokens up in its history.
#include <algorithm>
#include <string>
#include <vector>

#include "ssmjit/mamba2_model.h"

namespace ssmjit {

std::vector<int32_t> accepted_tokens(const std::vector<int32_t>& drafts, const std::vector<int32_t>& choices) {
  if (choices.empty() || drafts.size() >= choices.size())
    throw Error(Error::Kind::InvalidArgument,
                "accepted_tokens: got " + std::to_string(drafts.size()) + " drafts and " +
                    std::to_string(choices.size()) + " choices, expected at least one choice and at most choices - 1 drafts");
  std::vector<int32_t> out;
  size_t k = 0;
  while (k < drafts.size() && drafts[k] == choices[k]) out.push_back(drafts[k++]);
  out.push_back(choices[k]);
  return out;
}

std::vector<int32_t> prompt_lookup_draft(const std::vector<int32_t>& context, int64_t max_tokens, int64_t ngram) {
  if (max_tokens < 0 || ngram < 1)
    throw Error(Error::Kind::InvalidArgument, "prompt_lookup_draft: max_tokens is " + std::to_string(max_tokens) +
                                                  " and ngram " + std::to_string(ngram) +
                                                  ", expected max_tokens >= 0 and ngram >= 1");
  const auto n = static_cast<int64_t>(context.size());
  for (int64_t g = std::min(ngram, n - 1); g >= 1; --g) {
    // The latest earlier start s < n - g whose g tokens equal the context's last g.
    for (int64_t s = n - g - 1; s >= 0; --s) {
      bool match = true;
      for (int64_t j = 0; j < g && match; ++j) match = context[s + j] == context[n - g + j];
      if (!match) continue;
      const int64_t from = s + g, to = std::min(n, from + max_tokens);
      return {context.begin() + from, context.begin() + to};
    }
  }
  return {};
}

}  // namespace ssmjit

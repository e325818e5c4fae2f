// What the float64 reference ops share beyond element access: their argument error and the
// vector index of an int64 count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ssmjit/error.h"

namespace ssmjit::reference {

// Throws InvalidArgument "<op>: <msg>".
[[noreturn]] inline void invalid(const char* op, const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, std::string(op) + ": " + msg);
}

inline size_t at(int64_t i) { return static_cast<size_t>(i); }

// With dinitial_states each written slot's gradient comes from one sequence: throws unless the
// initial slots slotOf(i) of sequences i < n (-1: none; each in [0, nslots)) are distinct.
template <class SlotOf>
void checkDistinctInitialSlots(const char* op, int64_t n, int64_t nslots, SlotOf slotOf) {
  std::vector<int64_t> reader(at(nslots), -1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = slotOf(i);
    if (s < 0) continue;
    if (reader[at(s)] >= 0)
      invalid(op, "initial_state_indices[" + std::to_string(i) + "] = " + std::to_string(s) +
                      ", the slot of initial_state_indices[" + std::to_string(reader[at(s)]) +
                      "] too, expected distinct slots with dinitial_states (each slot's gradient is written by one "
                      "sequence)");
    reader[at(s)] = i;
  }
}

}  // namespace ssmjit::reference

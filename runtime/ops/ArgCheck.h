// The argument checker shared by the ops' checks (SelectiveStateUpdateCheck.h,
// CausalConv1dCheck.h): one message style for every op, "<op>: <argument> has <what came>,
// expected <what should>". Cold code: it only builds strings when it throws. Internal to the
// runtime.
#pragma once
#include <cstdint>
#include <string>

#include "ssmjit/error.h"
#include "ssmjit/tensor.h"

namespace ssmjit::detail {

// One expected dimension: its size and its name ("batch", "dstate", ...).
struct Dim {
  int64_t size;
  const char* name;
};

std::string listString(const int64_t* v, int n);  // "(1, 2, 3)"
std::string dimSizes(const Dim* d, int n);        // "(4, 8)"
std::string dimNames(const Dim* d, int n);        // "batch, nheads"
std::string hexPtr(const void* p);                // "0x10001"

// Sets of dtypes, one bit per DType value.
enum DTypeSet : unsigned { kFloat16Or32 = 0b00111, kF32Only = 0b00001, kIndexTypes = 0b11000 };

inline unsigned dtypeBit(DType t) { return 1u << static_cast<int>(t); }
bool inSet(DType t, unsigned set);
std::string setString(unsigned set);  // "float32, bfloat16 or float16"

class Checker {
 public:
  Checker(const char* op, DeviceKind device) : op_(op), device_(device) {}

  [[noreturn]] void fail(const std::string& msg) const;

  // Appended to rank and shape messages (e.g. " (Mamba-2 form: state has rank 4)").
  void setForm(const char* form) { form_ = form; }

  void required(const char* name, const TensorView& t) const;

  // Rank first (it decides how the other dims are read), then everything else in one go.
  void rank(const char* name, const TensorView& t, const Dim* exp, int n) const;

  // Shape, dtype (one of `dtypes`), device, strides (>= 0) and alignment to the element size.
  // `zeroStrideOk`: the tensor may broadcast (stride 0) along axes of size > 1. Only inputs read
  // once per program (parameters such as A, D, dt_bias, weight, bias) may: the others are
  // written, or indexed per row where a broadcast axis means the caller passed the wrong view.
  void tensor(const char* name, const TensorView& t, const Dim* exp, int n, unsigned dtypes, bool zeroStrideOk) const;

  void optional(const char* name, const TensorView& t, const Dim* exp, int n, unsigned dtypes,
                bool zeroStrideOk) const {
    if (t.defined()) tensor(name, t, exp, n, dtypes, zeroStrideOk);
  }

  // The CUDA device every tensor must be on, and the argument that fixed it (for messages).
  void setDeviceId(int id, const char* from = "state") {
    deviceId_ = id;
    deviceFrom_ = from;
  }

  // The call's lead tensor, the one that fixes its first sizes and its device: required, of
  // rank n, and on the device every other tensor must be on.
  void lead(const char* name, const TensorView& t, const Dim* exp, int n) {
    required(name, t);
    rank(name, t, exp, n);
    setDeviceId(t.deviceId, name);
  }

 private:
  const char* op_;
  DeviceKind device_;
  int deviceId_ = 0;
  const char* deviceFrom_ = "state";
  const char* form_ = "";
};

// An op's workspace `w`: a contiguous float32 buffer of at least `need` elements on the CUDA
// device of `on` (the op's first tensor, named `onName` in messages). Errors name `sizeFn` (the
// op's workspace-size function) and, when the workspace is missing, `missingNote` after it.
void checkWorkspace(const char* op, const TensorView& w, const TensorView& on, const char* onName, int64_t need,
                    const std::string& sizeFn, const std::string& missingNote = "");

// A packed row's cu_seqlens: given, the batch of `first` (the op's first tensor, named `firstName`)
// must be 1 and cu_seqlens an int32/int64 vector of at least 2 entries. Returns the sequences:
// nseq = cu_seqlens' entries - 1 when packed, else `batch` (a row is a sequence).
int64_t checkPackedRow(const Checker& c, const TensorView& cu, int64_t batch, const TensorView& first,
                       const char* firstName);

// `name` may be given only with `other` (indices with their states, a gradient with its input).
void onlyWith(const Checker& c, const char* name, const TensorView& t, const char* other, const TensorView& o,
              const char* why);

// A gradient `name` given exactly when its input forward.`input` is.
void exactlyWith(const Checker& c, const char* name, const TensorView& t, const char* input, const TensorView& in);

// The forward's arguments as a backward call reads them (Backward: SelectiveScanBackwardArgs or
// SsdBackwardArgs): dout in out's place, dfinal_states in the final states' (the forward's
// final_state_indices mapping its slots), no workspace.
template <class Backward>
auto forwardAsRead(const Backward& b) {
  auto f = b.forward;
  f.out = b.dout;
  f.final_states = b.dfinal_states;
  f.final_state_indices = b.dfinal_states.defined() ? b.forward.final_state_indices : TensorView{};
  f.workspace = {};
  return f;
}

// States (slots, inner...) with any number of slots and their slot indices `idx` (nseq,), given
// only with the states; without indices the states need a slot per sequence (sequence i uses
// slot i). Returns the slots (0 without states).
int64_t checkStateSlots(const Checker& c, const char* name, const TensorView& t, const char* idxName,
                        const TensorView& idx, const Dim* inner, int n, int64_t nseq);

}  // namespace ssmjit::detail

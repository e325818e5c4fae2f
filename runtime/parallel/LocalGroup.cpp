// The in-process group's collectives (LocalGroup.h): a meeting of the ranks' threads under one
// mutex, then plain copies on each rank's own stream.
#include "runtime/parallel/LocalGroup.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "runtime/Driver.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/error.h"

namespace ssmjit::parallel {
namespace {

size_t bytesOf(const TensorView& t) { return static_cast<size_t>(t.numel()) * dtypeBytes(t.dtype); }

CUdeviceptr devicePtr(const TensorView& t, int64_t elementOffset = 0) {
  return reinterpret_cast<CUdeviceptr>(t.data) + static_cast<CUdeviceptr>(elementOffset * dtypeBytes(t.dtype));
}

// The rank's stream drained, so that what it posts is written; a capturing stream is refused.
void drain(CUstream stream, const char* op) {
  const driver::Api& d = driver::api();
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  driver::check(d.cuStreamIsCapturing(stream, &capturing), "cuStreamIsCapturing");
  if (capturing != CU_STREAM_CAPTURE_STATUS_NONE)
    throw Error(Error::Kind::InvalidArgument,
                std::string(op) +
                    ": an in-process group's collectives run on the host and cannot be captured "
                    "in a CUDA graph");
  driver::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
}

// `count` elements of `t` from element `first`, as doubles.
std::vector<double> download(const TensorView& t, int64_t first, int64_t count) {
  std::vector<char> raw(static_cast<size_t>(count) * dtypeBytes(t.dtype));
  driver::check(driver::api().cuMemcpyDtoH(raw.data(), devicePtr(t, first), raw.size()), "cuMemcpyDtoH");
  const TensorView host = TensorView::contiguous(raw.data(), t.dtype, {count}, DeviceKind::CPU);
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = reference::loadElement(host, i);
  return v;
}

void upload(const TensorView& t, const std::vector<double>& v) {
  std::vector<char> raw(bytesOf(t));
  const TensorView host = TensorView::contiguous(raw.data(), t.dtype, {t.numel()}, DeviceKind::CPU);
  for (int64_t i = 0; i < t.numel(); ++i) reference::storeElement(host, i, v[i]);
  driver::check(driver::api().cuMemcpyHtoD(devicePtr(t), raw.data(), raw.size()), "cuMemcpyHtoD");
}

// The element-wise sum over ranks, in rank order, of `count` elements from `first` of each view.
std::vector<double> sumOver(const std::vector<TensorView>& views, int64_t first, int64_t count) {
  std::vector<double> sum(static_cast<size_t>(count), 0.0);
  for (const TensorView& v : views) {
    const std::vector<double> part = download(v, first, count);
    for (int64_t i = 0; i < count; ++i) sum[i] += part[i];
  }
  return sum;
}

}  // namespace

void LocalGroup::failLocked(const std::string& why) {
  if (broken_.empty()) broken_ = why;
  changed_.notify_all();
}

void LocalGroup::throwBroken(int rank) const {
  throw Error(Error::Kind::Cuda,
              "rank " + std::to_string(rank) + " of " + std::to_string(size_) + " (in-process group): " + broken_);
}

void LocalGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  failLocked(why);
}

template <class Pred>
void LocalGroup::waitFor(std::unique_lock<std::mutex>& lock, int rank, const std::string& what, Pred ready) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  const bool done = changed_.wait_until(lock, deadline, [&] { return !broken_.empty() || ready(); });
  if (!broken_.empty()) throwBroken(rank);
  if (!done) {
    failLocked("rank " + std::to_string(rank) + " timed out after " + std::to_string(timeout_s_) + " s in " + what +
               " (did every rank call it, in the same order?)");
    throwBroken(rank);
  }
}

std::vector<LocalGroup::Post> LocalGroup::meet(int rank, Post mine) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!broken_.empty()) throwBroken(rank);
  const std::string op = mine.op;
  const uint64_t round = round_;
  posts_[rank] = std::move(mine);
  if (++arrived_ == size_) {
    arrived_ = 0;
    met_ = posts_;
    ++round_;
    changed_.notify_all();
  } else {
    waitFor(lock, rank, op, [&] { return round_ != round; });
  }
  for (int r = 0; r < size_; ++r)
    if (met_[r].op != op) {
      failLocked("the ranks called different collectives: rank " + std::to_string(rank) + " " + op + ", rank " +
                 std::to_string(r) + " " + met_[r].op);
      throwBroken(rank);
    }
  return met_;
}

void LocalGroup::allReduceSum(int rank, const TensorView& data, CUstream stream) {
  drain(stream, "allReduceSum");
  const std::vector<Post> all = meet(rank, {"allReduceSum " + std::to_string(data.numel()), data});
  std::vector<TensorView> views;
  for (const Post& p : all) views.push_back(p.view);
  const std::vector<double> sum = sumOver(views, 0, data.numel());
  meet(rank, {"allReduceSum: read", {}});  // every rank has read every buffer before any is written
  upload(data, sum);
}

void LocalGroup::allGather(int rank, const TensorView& in, const TensorView& out, CUstream stream) {
  drain(stream, "allGather");
  const std::vector<Post> all = meet(rank, {"allGather " + std::to_string(in.numel()), in});
  for (int r = 0; r < size_; ++r)
    driver::check(
        driver::api().cuMemcpyDtoDAsync(devicePtr(out, r * in.numel()), devicePtr(all[r].view), bytesOf(in), stream),
        "cuMemcpyDtoDAsync");
  driver::check(driver::api().cuStreamSynchronize(stream), "cuStreamSynchronize");
  meet(rank, {"allGather: read", {}});
}

void LocalGroup::reduceScatterSum(int rank, const TensorView& in, const TensorView& out, CUstream stream) {
  drain(stream, "reduceScatterSum");
  const std::vector<Post> all = meet(rank, {"reduceScatterSum " + std::to_string(out.numel()), in});
  std::vector<TensorView> views;
  for (const Post& p : all) views.push_back(p.view);
  const std::vector<double> sum = sumOver(views, rank * out.numel(), out.numel());
  meet(rank, {"reduceScatterSum: read", {}});
  upload(out, sum);
}

void LocalGroup::sendRecv(int rank, const TensorView& send, int to, const TensorView& recv, int from, CUstream stream) {
  const bool doSend = send.defined() && to >= 0, doRecv = recv.defined() && from >= 0;
  drain(stream, "sendRecv");
  uint64_t sent = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!broken_.empty()) throwBroken(rank);
  if (doSend) {
    sent = nextLetter_++;
    mail_[{rank, to}].push_back({send, sent});
    changed_.notify_all();
  }
  if (doRecv) {
    std::vector<Letter>& box = mail_[{from, rank}];
    waitFor(lock, rank, "sendRecv (receiving from rank " + std::to_string(from) + ")", [&] { return !box.empty(); });
    const Letter letter = box.front();
    box.erase(box.begin());
    if (letter.view.numel() != recv.numel() || letter.view.dtype != recv.dtype) {
      failLocked("sendRecv: rank " + std::to_string(from) + " sent " + std::to_string(letter.view.numel()) +
                 " elements of " + dtypeName(letter.view.dtype) + ", rank " + std::to_string(rank) + " receives " +
                 std::to_string(recv.numel()) + " of " + dtypeName(recv.dtype));
      throwBroken(rank);
    }
    lock.unlock();
    driver::check(driver::api().cuMemcpyDtoDAsync(devicePtr(recv), devicePtr(letter.view), bytesOf(recv), stream),
                  "cuMemcpyDtoDAsync");
    driver::check(driver::api().cuStreamSynchronize(stream), "cuStreamSynchronize");
    lock.lock();
    taken_.push_back(letter.id);
    changed_.notify_all();
  }
  if (doSend)  // the send buffer stays untouched until its receiver has copied it
    waitFor(lock, rank, "sendRecv (sending to rank " + std::to_string(to) + ")",
            [&] { return std::find(taken_.begin(), taken_.end(), sent) != taken_.end(); });
  if (doSend) taken_.erase(std::find(taken_.begin(), taken_.end(), sent));
}

}  // namespace ssmjit::parallel

// RAII device memory for tests, examples and `ssmjit bench` (the ops themselves never allocate).
// Internal to the runtime; synchronous copies, so results are ready when a call returns.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ssmjit {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // cuMemAlloc of `bytes` in the current context (driver::ensureContext()); 0 bytes holds nothing.
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // A buffer holding a copy of `host`.
  template <class T>
  static DeviceBuffer fromHost(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    b.upload(host);
    return b;
  }

  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr_)); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data());
  }
  size_t bytes() const { return bytes_; }
  template <class T>
  size_t count() const {
    return bytes_ / sizeof(T);
  }

  // Copies host -> device at byte offset `offset`; throws if it would run past the end.
  void uploadBytes(const void* src, size_t bytes, size_t offset = 0);
  // Copies device -> host from byte offset `offset`; throws if it would run past the end.
  void downloadBytes(void* dst, size_t bytes, size_t offset = 0) const;
  // Sets every byte to `value` (0xFF poisons floats as NaN, e.g. outputs before a test) on the
  // legacy default stream and waits. That orders it after blocking streams only: synchronise a
  // CU_STREAM_NON_BLOCKING stream (OwnedStream's default) before filling what it uses.
  void fill(uint8_t value);

  template <class T>
  void upload(const std::vector<T>& host, size_t offsetElems = 0) {
    uploadBytes(host.data(), host.size() * sizeof(T), offsetElems * sizeof(T));
  }
  template <class T>
  void upload(const T* host, size_t count, size_t offsetElems = 0) {
    uploadBytes(host, count * sizeof(T), offsetElems * sizeof(T));
  }
  // The whole buffer (bytes() / sizeof(T) elements), or `count` elements from `offsetElems`.
  template <class T>
  std::vector<T> download() const {
    return download<T>(bytes_ / sizeof(T));
  }
  template <class T>
  std::vector<T> download(size_t count, size_t offsetElems = 0) const {
    std::vector<T> out(count);
    downloadBytes(out.data(), count * sizeof(T), offsetElems * sizeof(T));
    return out;
  }

  void reset();  // frees now

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

}  // namespace ssmjit

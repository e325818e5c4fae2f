#include "runtime/DeviceBuffer.h"

#include <string>
#include <utility>

#include "runtime/Driver.h"
#include "ssmjit/error.h"

namespace ssmjit {

DeviceBuffer::DeviceBuffer(size_t bytes) {
  if (bytes == 0) return;
  driver::ensureContext();
  driver::check(driver::api().cuMemAlloc(&ptr_, bytes), ("cuMemAlloc(" + std::to_string(bytes) + " bytes)").c_str());
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (ptr_) {
    // No throw from a destructor; a failure here (e.g. the driver shutting down at exit) leaks.
    driver::api().cuMemFree(ptr_);
    ptr_ = 0;
    bytes_ = 0;
  }
}

namespace {
void checkRange(const char* what, size_t bytes, size_t offset, size_t size) {
  if (offset > size || bytes > size - offset)
    throw Error(Error::Kind::InvalidArgument, std::string("DeviceBuffer::") + what + ": " + std::to_string(bytes) +
                                                  " bytes at offset " + std::to_string(offset) +
                                                  " run past the end of the " + std::to_string(size) + "-byte buffer");
}
}  // namespace

void DeviceBuffer::uploadBytes(const void* src, size_t bytes, size_t offset) {
  checkRange("upload", bytes, offset, bytes_);
  if (bytes == 0) return;
  driver::check(driver::api().cuMemcpyHtoD(ptr_ + offset, src, bytes),
                ("cuMemcpyHtoD(" + std::to_string(bytes) + " bytes)").c_str());
}

void DeviceBuffer::downloadBytes(void* dst, size_t bytes, size_t offset) const {
  checkRange("download", bytes, offset, bytes_);
  if (bytes == 0) return;
  driver::check(driver::api().cuMemcpyDtoH(dst, ptr_ + offset, bytes),
                ("cuMemcpyDtoH(" + std::to_string(bytes) + " bytes)").c_str());
}

void DeviceBuffer::fill(uint8_t value) {
  if (bytes_ == 0) return;
  const driver::Api& a = driver::api();
  // The legacy default stream, then a wait: ordered after earlier work on blocking streams.
  driver::check(a.cuMemsetD8Async(ptr_, value, bytes_, nullptr),
                ("cuMemsetD8Async(" + std::to_string(bytes_) + " bytes)").c_str());
  driver::check(a.cuStreamSynchronize(nullptr), "cuStreamSynchronize(after DeviceBuffer::fill)");
}

}  // namespace ssmjit

// A bounds-checked reader of the few parts of a CUBIN (ELF64, little-endian, EM_CUDA) that carry
// resource figures. Every offset and size comes from the blob, so each is checked before use.
#include "compiler/CubinInfo.h"

#include <climits>
#include <cstdint>
#include <map>
#include <string_view>
#include <unordered_map>

namespace ssmjit {
namespace {

constexpr uint16_t kEmCuda = 190;
constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtNobits = 8;
constexpr uint16_t kShnXindex = 0xffff;
constexpr size_t kEhdrSize = 64, kShdrSize = 64, kSymSize = 24;
constexpr uint8_t kSttFunc = 2;
constexpr uint8_t kStoCudaEntry = 0x10;

// EIATTR formats and the attributes read here.
constexpr uint8_t kEifmtNval = 1, kEifmtBval = 2, kEifmtHval = 3, kEifmtSval = 4;
constexpr uint8_t kEiattrFrameSize = 0x11, kEiattrMinStackSize = 0x12, kEiattrMaxStackSize = 0x23,
                  kEiattrRegcount = 0x2f;

// sm_90 reserves this much at the start of each kernel's shared window without naming the size
// (sm_100+ names it in .nv.reservedSmem.cap).
constexpr int kSm90ReservedShared = 0x400;
// Larger than any shared window, stack or register file: a figure beyond it is garbage.
constexpr uint64_t kSaneLimit = 1u << 30;

// A view of the blob whose reads fail instead of running off its end.
struct Bytes {
  const unsigned char* p;
  size_t n;
  bool has(uint64_t off, uint64_t len) const { return off <= n && len <= n - off; }
  uint64_t le(uint64_t off, int width) const {  // caller checked has(off, width)
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | p[off + i];
    return v;
  }
};

struct Section {
  uint32_t name, type, link;
  uint64_t offset, size, entsize;
  std::string_view nameStr;
};

// The NUL-terminated string at `off` in string table `st`, or nothing if it runs past the table.
bool stringAt(const Bytes& b, const Section& st, uint64_t off, std::string_view* out) {
  if (st.type == kShtNobits || !b.has(st.offset, st.size) || off >= st.size) return false;
  const char* s = reinterpret_cast<const char*>(b.p + st.offset + off);
  size_t max = st.size - off;
  size_t len = 0;
  while (len < max && s[len] != '\0') ++len;
  if (len == max) return false;
  *out = std::string_view(s, len);
  return true;
}

struct FuncAttr {
  int registers = -1, frame = -1, minStack = -1, maxStack = -1;
};

// Reads one EIATTR section's per-function records into `attrs` (by symbol index). A structurally
// broken section contributes nothing: its earlier records cannot be trusted either.
void readNvInfo(const Bytes& b, const Section& s, uint64_t numSyms, std::map<uint64_t, FuncAttr>* attrs) {
  if (s.type == kShtNobits || !b.has(s.offset, s.size)) return;
  struct Rec {
    uint8_t attr;
    uint64_t sym;
    uint64_t value;
  };
  std::vector<Rec> recs;
  uint64_t pos = s.offset, end = s.offset + s.size;
  while (pos < end) {
    if (end - pos < 4) return;  // a record is at least format, attribute and 2 bytes
    uint8_t fmt = b.p[pos], attr = b.p[pos + 1];
    uint64_t payload = 0;
    switch (fmt) {
      case kEifmtNval:
      case kEifmtBval:
      case kEifmtHval:
        break;  // the 2 bytes after the attribute are the value
      case kEifmtSval:
        payload = b.le(pos + 2, 2);
        break;
      default:
        return;  // unknown format: its length is unknown, so is everything after it
    }
    if (end - pos - 4 < payload) return;
    if (fmt == kEifmtSval && payload >= 8 && payload % 4 == 0 &&
        (attr == kEiattrRegcount || attr == kEiattrFrameSize || attr == kEiattrMinStackSize ||
         attr == kEiattrMaxStackSize))
      recs.push_back({attr, b.le(pos + 4, 4), b.le(pos + 8, 4)});
    pos += 4 + payload;
  }
  for (const Rec& r : recs) {
    if (r.sym == 0 || r.sym >= numSyms || r.value > kSaneLimit) continue;
    FuncAttr& f = (*attrs)[r.sym];
    int* dst = r.attr == kEiattrRegcount       ? &f.registers
               : r.attr == kEiattrFrameSize    ? &f.frame
               : r.attr == kEiattrMinStackSize ? &f.minStack
                                               : &f.maxStack;
    int v = static_cast<int>(r.value);
    if (v > *dst) *dst = v;  // several records for one function: the largest
  }
}

}  // namespace

const CubinKernel* CubinInfo::find(const std::string& name) const {
  for (const auto& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

CubinInfo readCubinInfo(const void* data, size_t size) {
  CubinInfo info;
  Bytes b{static_cast<const unsigned char*>(data), data ? size : 0};
  auto fail = [&](const char* why) {
    info.ok = false;
    info.error = why;
    info.kernels.clear();
    return info;
  };

  // ELF header: magic, ELFCLASS64, ELFDATA2LSB, EM_CUDA.
  if (!b.has(0, kEhdrSize)) return fail("shorter than an ELF64 header");
  if (b.p[0] != 0x7f || b.p[1] != 'E' || b.p[2] != 'L' || b.p[3] != 'F') return fail("not an ELF file");
  if (b.p[4] != 2 || b.p[5] != 1) return fail("not a 64-bit little-endian ELF file");
  if (b.le(18, 2) != kEmCuda) return fail("not a CUDA ELF file (e_machine is not EM_CUDA)");
  uint64_t shoff = b.le(40, 8), shentsize = b.le(58, 2), shnum = b.le(60, 2), shstrndx = b.le(62, 2);
  if (shentsize < kShdrSize) return fail("section header entries too small");
  if (shoff == 0 || !b.has(shoff, shentsize)) return fail("section header table outside the file");
  // Extended numbering: section 0 holds the real count and string-table index.
  if (shnum == 0) shnum = b.le(shoff + 32, 8);
  if (shstrndx == kShnXindex) shstrndx = b.le(shoff + 40, 4);
  if (shnum == 0 || shnum > b.n / shentsize || !b.has(shoff, shnum * shentsize))
    return fail("section header table outside the file");
  if (shstrndx >= shnum) return fail("section name table index out of range");

  std::vector<Section> secs(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    uint64_t h = shoff + i * shentsize;
    Section& s = secs[i];
    s.name = static_cast<uint32_t>(b.le(h, 4));
    s.type = static_cast<uint32_t>(b.le(h + 4, 4));
    s.offset = b.le(h + 24, 8);
    s.size = b.le(h + 32, 8);
    s.link = static_cast<uint32_t>(b.le(h + 40, 4));
    s.entsize = b.le(h + 56, 8);
  }
  std::unordered_map<std::string_view, uint64_t> byName;
  for (uint64_t i = 1; i < shnum; ++i)
    if (stringAt(b, secs[shstrndx], secs[i].name, &secs[i].nameStr)) byName.emplace(secs[i].nameStr, i);

  // The symbol table and its strings.
  uint64_t symtab = 0;
  for (uint64_t i = 1; i < shnum && !symtab; ++i)
    if (secs[i].type == kShtSymtab) symtab = i;
  if (!symtab) return fail("no symbol table");
  const Section& st = secs[symtab];
  if (st.entsize < kSymSize || !b.has(st.offset, st.size) || st.link >= shnum)
    return fail("symbol table outside the file");
  uint64_t numSyms = st.size / st.entsize;
  const Section& strtab = secs[st.link];

  // Figures of the reserved shared block: see CubinInfo.h.
  bool sawOffset0 = byName.count(".nv.shared.reserved.0") > 0;
  int cap = -1;
  std::vector<std::pair<uint64_t, std::string_view>> funcs, entries;
  for (uint64_t i = 1; i < numSyms; ++i) {
    uint64_t e = st.offset + i * st.entsize;
    std::string_view name;
    if (!stringAt(b, strtab, b.le(e, 4), &name)) continue;
    uint8_t infoByte = b.p[e + 4], other = b.p[e + 5];
    if (name == ".nv.reservedSmem.cap") {
      uint64_t v = b.le(e + 8, 8);
      cap = v <= kSaneLimit ? static_cast<int>(v) : -2;
    } else if (name == ".nv.reservedSmem.offset0") {
      sawOffset0 = true;
    }
    if ((infoByte & 0xf) != kSttFunc || name.empty()) continue;
    funcs.emplace_back(i, name);
    if (other & kStoCudaEntry) entries.emplace_back(i, name);
  }
  // A toolkit that stopped marking entries: the functions with per-kernel info are the kernels.
  if (entries.empty())
    for (const auto& f : funcs)
      if (byName.count(".nv.info." + std::string(f.second))) entries.push_back(f);

  info.reservedSharedBytes = cap >= 0 ? cap : cap == -2 ? -1 : sawOffset0 ? kSm90ReservedShared : 0;

  std::map<uint64_t, FuncAttr> attrs;
  for (uint64_t i = 1; i < shnum; ++i) {
    std::string_view n = secs[i].nameStr;
    if ((n == ".nv.info" || n.rfind(".nv.info.", 0) == 0) && secs[i].link == symtab)
      readNvInfo(b, secs[i], numSyms, &attrs);
  }

  for (const auto& [sym, name] : entries) {
    CubinKernel k;
    k.name = std::string(name);
    if (auto it = attrs.find(sym); it != attrs.end()) {
      k.registers = it->second.registers;
      k.frameBytes = it->second.frame;
      k.minStackBytes = it->second.minStack;
      k.maxStackBytes = it->second.maxStack;
    }
    uint64_t shared = 0;
    if (auto it = byName.find(".nv.shared." + k.name); it != byName.end()) shared = secs[it->second].size;
    if (shared <= kSaneLimit) {
      k.sharedSectionBytes = static_cast<int>(shared);
      int reserved = info.reservedSharedBytes;
      if (shared == 0)
        k.sharedBytes = 0;
      else if (reserved >= 0 && k.sharedSectionBytes >= reserved)
        k.sharedBytes = k.sharedSectionBytes - reserved;
      // else: a section smaller than the reserved block, or a reserve of unknown size: unknown.
    }
    info.kernels.push_back(std::move(k));
  }
  info.ok = true;
  return info;
}

ResourceUsage cubinResources(const CubinInfo& info) {
  ResourceUsage ru;
  if (!info.ok || info.kernels.empty()) return ru;
  // The maximum over kernels, or -1 as soon as one kernel lacks the figure.
  auto fold = [&](auto get) {
    int m = -1;
    for (const auto& k : info.kernels) {
      int v = get(k);
      if (v < 0) return -1;
      m = v > m ? v : m;
    }
    return m;
  };
  ru.registers = fold([](const CubinKernel& k) { return k.registers; });
  ru.sharedBytes = fold([](const CubinKernel& k) { return k.sharedBytes; });
  ru.localBytes = fold([](const CubinKernel& k) { return k.stackBytes(); });
  return ru;
}

}  // namespace ssmjit

// What a multi-GPU run does before any GPU work, without a GPU: the rendezvous of NCCL's unique id
// (file and TCP, ranks as threads), the comparison of the ranks' configurations, the loader's
// message when libnccl is missing and the communicator's argument checks.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "runtime/parallel/ConfigCheck.h"
#include "runtime/parallel/Nccl.h"
#include "runtime/parallel/Rendezvous.h"
#include "ssmjit/parallel.h"
#include "tests/support/ExpectError.h"
#include "tests/support/ScratchDir.h"

using namespace ssmjit;
using namespace ssmjit::testing;
using parallel::shareFromRankZero;

namespace {

std::vector<char> idBytes(char seed) {
  std::vector<char> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(seed + 3 * i);
  return id;
}

// What each of `size` ranks (threads) receives, rank 0 sharing idBytes(7); an error as its text.
std::vector<std::string> runRanks(const std::string& address, int size, double timeout = 10) {
  std::vector<std::string> got(size);
  std::vector<std::thread> ranks;
  for (int r = size - 1; r >= 0; --r)  // the readers first: they must wait for rank 0
    ranks.emplace_back([&, r] {
      try {
        const std::vector<char> b = shareFromRankZero(address, r, size, r == 0 ? idBytes(7) : idBytes(0), timeout);
        got[r] = b == idBytes(7) ? "ok" : "wrong bytes";
      } catch (const std::exception& e) {
        got[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return got;
}

int freePort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

TEST(Rendezvous, AFileHandsRankZerosBytesToEveryRank) {
  ScratchDir dir;
  const std::string path = dir.path() + "/id";
  for (const std::string& g : runRanks(path, 4)) EXPECT_EQ(g, "ok");
  EXPECT_TRUE(std::filesystem::exists(path));
  parallel::removeRendezvous(path);
  EXPECT_FALSE(std::filesystem::exists(path));
  // file:// names the same thing.
  for (const std::string& g : runRanks("file://" + path, 2)) EXPECT_EQ(g, "ok");
}

TEST(Rendezvous, TcpHandsRankZerosBytesToEveryRank) {
  const std::string address = "tcp://127.0.0.1:" + std::to_string(freePort());
  for (const std::string& g : runRanks(address, 3)) EXPECT_EQ(g, "ok");
}

TEST(Rendezvous, AMissingRankZeroEndsInABoundedTimeNamingTheAddress) {
  ScratchDir dir;
  const std::string path = dir.path() + "/never";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    shareFromRankZero(path, 1, 2, idBytes(0), 0.3);
    ADD_FAILURE() << "no error without rank 0";
  } catch (const Error& e) {
    EXPECT_MENTIONS(std::string(e.what()), "rendezvous " + path, "rank 0 did not write it within");
  }
  const std::string tcp = "tcp://127.0.0.1:" + std::to_string(freePort());
  try {
    shareFromRankZero(tcp, 1, 2, idBytes(0), 0.3);
    ADD_FAILURE() << "no error without rank 0";
  } catch (const Error& e) {
    EXPECT_MENTIONS(std::string(e.what()), "rendezvous " + tcp, "no id from rank 0 within");
  }
  // Rank 0 alone: the others never connect.
  try {
    shareFromRankZero(tcp, 0, 3, idBytes(7), 0.3);
    ADD_FAILURE() << "no error without the other ranks";
  } catch (const Error& e) {
    EXPECT_MENTIONS(std::string(e.what()), "0 of 2 ranks connected within");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(Rendezvous, BadArgumentsAreNamed) {
  EXPECT_MENTIONS(invalidArgMessage([] { shareFromRankZero("tcp://nohostport", 1, 2, idBytes(0), 1); }),
                  "rendezvous 'tcp://nohostport' is not tcp://host:port");
  EXPECT_MENTIONS(invalidArgMessage([] { shareFromRankZero("", 0, 2, idBytes(0), 1); }), "rendezvous is empty");
  EXPECT_MENTIONS(invalidArgMessage([] { shareFromRankZero("/tmp/x", 2, 2, idBytes(0), 1); }),
                  "rank is 2, expected [0, 2)");
  // A file that is not a rendezvous, or one of another length.
  ScratchDir dir;
  const std::string path = dir.path() + "/id";
  parallel::shareFromRankZero(path, 0, 2, std::vector<char>(16, 'x'), 1);
  try {
    shareFromRankZero(path, 1, 2, idBytes(0), 1);
    ADD_FAILURE() << "a 16-byte id was taken for a 128-byte one";
  } catch (const Error& e) {
    EXPECT_MENTIONS(std::string(e.what()), "carries 16 bytes, expected 128");
  }
}

TEST(ConfigCheck, EqualConfigsPassAndEveryDifferenceIsNamed) {
  using parallel::configMismatch;
  using parallel::encodeConfig;
  const parallel::ConfigPairs a = {{"model", "/m"}, {"groups", "8"}, {"tp", "2"}};
  EXPECT_EQ(configMismatch({encodeConfig(a), encodeConfig(a), encodeConfig(a)}), "");
  parallel::ConfigPairs b = a;
  b[1].second = "4";
  const std::string d = configMismatch({encodeConfig(a), encodeConfig(a), encodeConfig(b)});
  EXPECT_EQ(d, "groups: rank 2 has 4, rank 0 has 8");
  parallel::ConfigPairs c = {{"groups", "8"}, {"tp", "4"}};
  EXPECT_EQ(configMismatch({encodeConfig(a), encodeConfig(c)}),
            "model: rank 1 has no value, rank 0 has /m\ntp: rank 1 has 4, rank 0 has 2");
  EXPECT_MENTIONS(invalidArgMessage([] { encodeConfig({{"a=b", "1"}}); }), "config entry 'a=b=1' is not a key=value");
  EXPECT_MENTIONS(invalidArgMessage([] { encodeConfig({{"k", std::string(3000, 'v')}}); }), "expected under 2048");
}

TEST(NcclLoader, SaysWhyWhenLibncclIsMissing) {
  nccl::Api api;
  std::string why;
  EXPECT_FALSE(nccl::detail::tryLoad({"libssmjit_no_such_nccl.so.2"}, &api, &why));
  EXPECT_MENTIONS(why, "libnccl not found", "libssmjit_no_such_nccl.so.2: ",
                  "/usr/local/cuda/lib/libssmjit_no_such_nccl.so.2");
  if (!ncclAvailable(&why)) {
    try {
      (void)nccl::api();
      ADD_FAILURE() << "nccl::api() did not throw although the library is unavailable";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::Unavailable);
      EXPECT_MENTIONS(std::string(e.what()), "NCCL unavailable: ", why);
    }
    GTEST_SKIP() << "libnccl not loadable here: " << why;
  }
  EXPECT_TRUE(nccl::detail::tryLoad({"libnccl.so.2", "libnccl.so"}, &api, &why)) << why;
  EXPECT_MENTIONS(nccl::describe(ncclInvalidArgument), "ncclResult 4 (");
}

TEST(Communicator, BadOptionsAreRefusedBeforeAnyWait) {
  CommunicatorOptions o;
  o.rank = 2;
  o.size = 2;
  EXPECT_MENTIONS(invalidArgMessage([&] { Communicator::create(o); }), "rank 2 of size 2, expected 0 <= rank < size");
  o.rank = 0;
  o.timeout_s = 0;
  EXPECT_MENTIONS(invalidArgMessage([&] { Communicator::create(o); }), "timeout_s is 0");
  o.timeout_s = 1;
  o.config = {{"bad\nkey", "1"}};
  EXPECT_MENTIONS(invalidArgMessage([&] { Communicator::create(o); }), "is not a key=value pair");
}

}  // namespace

// Handing a few bytes (NCCL's unique id) from rank 0 to every other rank before any communicator
// exists. `address` is a file path or "tcp://host:port":
//   file: rank 0 writes path.tmp.<pid> and renames it to path (readers never see a partial file);
//         the others poll until it is there. Use a fresh path per run: rank 0 removes an old file
//         first, but a rank that reads before that would take a stale id (then NCCL's setup fails
//         or times out). removeRendezvous() deletes it once every rank has joined.
//   tcp:  rank 0 listens on host:port and sends the bytes to each of the size - 1 others, who
//         connect (retrying while refused) and read them.
// Both wait at most timeout_s and then throw ssmjit::Error naming the address and what did not
// arrive. Internal to the runtime.
#pragma once
#include <string>
#include <vector>

namespace ssmjit::parallel {

// Rank 0 passes `payload` and gets it back; the others pass any bytes of the same length and get
// rank 0's (the length is checked).
std::vector<char> shareFromRankZero(const std::string& address, int rank, int size, const std::vector<char>& payload,
                                    double timeout_s);
// Rank 0, after every rank has joined: removes a file rendezvous (nothing for tcp).
void removeRendezvous(const std::string& address);

}  // namespace ssmjit::parallel

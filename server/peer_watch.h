// Tells whether the client of a plain (non-streamed) request has gone away.
// cpp-httplib 0.11 gives a handler no view of its connection, so the socket is found by
// its address pair among the process's descriptors, and peeked without consuming data.
// (A client that half-closes its sending side while it waits for the answer reads as
// gone; the common clients do not.)
#pragma once
#include <string>

namespace strata::server {

class PeerWatch {
public:
    PeerWatch(const std::string& remote_addr, int remote_port, int local_port);
    bool found() const { return fd_ >= 0; }
    // True once the peer has closed or reset the connection.
    bool gone() const;

private:
    int fd_ = -1;
};

}  // namespace strata::server

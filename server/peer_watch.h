// Tells whether the client of a plain (non-streamed) request has gone away, by looking
// at its connection's socket without consuming data (the Listener says which socket
// the calling worker serves).
//
// A client that closed its socket and one that only half-closed it (shutdown of its
// sending side, still waiting for the answer) look the same from here: both sent a
// FIN. On the first end of stream the watch sends one byte of TCP urgent data: a closed
// socket answers it with a reset, which gone() then sees; a socket that still reads
// never sees the byte (urgent data stays out of band unless the client sets
// SO_OOBINLINE, which HTTP clients do not), so a half-closed client gets its answer.
#pragma once

namespace strata::server {

class PeerWatch {
public:
    explicit PeerWatch(int fd) : fd_(fd) {}
    bool found() const { return fd_ >= 0; }
    // True once the peer has closed or reset the connection.
    bool gone();

private:
    int fd_ = -1;
    bool probed_ = false;
};

}  // namespace strata::server

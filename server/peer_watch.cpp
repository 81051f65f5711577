#include "server/peer_watch.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>

namespace strata::server {

bool PeerWatch::gone() {
    if (fd_ < 0) return false;
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == ECONNRESET || errno == ENOTCONN || errno == EPIPE)) return true;
    tcp_info info{};
    socklen_t len = sizeof info;
    if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE) return true;
    if (n == 0 && !probed_) {  // end of stream: closed, or half-closed?
        probed_ = true;
        send(fd_, "!", 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return false;
}

}  // namespace strata::server

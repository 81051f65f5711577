#include "server/peer_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace strata::server {
namespace {

// Address and port of a sockaddr, as text and number.
bool endpoint(const sockaddr_storage& ss, std::string* addr, int* port) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
        *port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
        *port = ntohs(a->sin6_port);
    } else {
        return false;
    }
    *addr = buf;
    return true;
}

}  // namespace

PeerWatch::PeerWatch(const std::string& remote_addr, int remote_port, int local_port) {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return;
    while (dirent* e = readdir(d)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0') continue;
        sockaddr_storage peer{}, self{};
        socklen_t pl = sizeof peer, sl = sizeof self;
        if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
        if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
        std::string pa, sa;
        int pp = 0, sp = 0;
        if (!endpoint(peer, &pa, &pp) || !endpoint(self, &sa, &sp)) continue;
        if (pp == remote_port && sp == local_port && pa == remote_addr) {
            fd_ = static_cast<int>(fd);
            break;
        }
    }
    closedir(d);
}

bool PeerWatch::gone() const {
    if (fd_ < 0) return false;
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;  // orderly close
    return n < 0 && (errno == ECONNRESET || errno == ENOTCONN || errno == EPIPE);
}

}  // namespace strata::server

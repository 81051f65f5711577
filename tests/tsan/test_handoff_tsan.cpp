// Hand-off and device-queue code under ThreadSanitizer (built by scripts/tsan.sh):
// two CPU devices pass payloads through a Handoff for many windows, with aborts and
// resets in between; any data race fails the run.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/backend/device.h"
#include "engine/backend/handoff.h"

using namespace strata;

int main() {
    auto d0 = open_device("cpu:0", 2, 0);
    auto d1 = open_device("cpu:1", 2, 1);
    const size_t n = 4096;
    Handoff h(*d0, n);
    std::vector<float> got(n);
    std::atomic<int> bad{0};
    for (uint64_t w = 1; w <= 300; ++w) {
        // The reader is launched first, as in overlap mode: it must wait for the flag.
        d1->submit([&, w] {
            if (h.wait(w, 5000) != Handoff::Wait::Ready) {
                ++bad;
                return;
            }
            for (size_t i = 0; i < n; ++i) got[i] = h.payload()[i];
            for (size_t i = 0; i < n; ++i)
                if (got[i] != static_cast<float>(w * 7 + i)) {
                    ++bad;
                    break;
                }
        });
        d0->submit([&, w] {
            for (size_t i = 0; i < n; ++i) h.payload()[i] = static_cast<float>(w * 7 + i);
            h.publish(w);
        });
        const DeviceEvent e1 = d1->record();
        const DeviceEvent e0 = d0->record();
        if (!e1.wait(10000) || !e0.wait(10000)) {
            std::fprintf(stderr, "window %llu did not complete\n", static_cast<unsigned long long>(w));
            return 1;
        }
        if (w % 50 == 0) {  // an abort releases a waiter that would never be served
            d1->submit([&] {
                if (h.wait(~uint64_t{0} - 1, 0) != Handoff::Wait::Aborted) ++bad;
            });
            h.abort();
            if (!d1->record().wait(10000)) return 1;
            h.reset();
        }
    }
    // Exceptions in ops reach the event.
    d0->submit([] { throw std::runtime_error("boom"); });
    const DeviceEvent e = d0->record();
    e.wait(0);
    bool threw = false;
    try {
        e.rethrow();
    } catch (const std::runtime_error&) {
        threw = true;
    }
    if (!threw || bad.load() != 0) {
        std::fprintf(stderr, "FAILED: bad=%d threw=%d\n", bad.load(), threw);
        return 1;
    }
    std::printf("tsan: hand-off and queue test ok (300 windows)\n");
    return 0;
}

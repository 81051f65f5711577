// A deadline watched by a thread of its own: fire() runs there when the deadline passes
// before disarm(). It is the host's watchdog over work that runs on the caller's own
// thread (SplitRunnerImpl::run_on): that caller cannot time itself out, so fire()
// releases what it may be waiting on, and the caller, once back, sees that it fired.
// arm and disarm only write the deadline, and the thread looks at it every poll: a
// window arms it and disarms it without waking a thread (on a small VM a wake-up takes a
// core for up to a millisecond, a third of a decode window).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace strata {

class Alarm {
public:
    Alarm(std::function<void()> fire, std::chrono::milliseconds poll);
    ~Alarm();
    Alarm(const Alarm&) = delete;
    Alarm& operator=(const Alarm&) = delete;

    void arm(std::chrono::milliseconds after);  // from now; re-arming moves the deadline
    // Whether it fired since the last arm; after a fire that has begun, once it ended.
    bool disarm();

private:
    void loop();

    std::function<void()> fire_;
    std::chrono::milliseconds poll_;
    std::mutex mu_;  // held by a fire, so that disarm returns after it
    std::condition_variable cv_;  // for stop_ only
    std::chrono::steady_clock::time_point deadline_{};
    bool armed_ = false, fired_ = false, stop_ = false;
    std::thread thread_;
};

}  // namespace strata

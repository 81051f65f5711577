#include "engine/core/alarm.h"

#include <algorithm>

namespace strata {

Alarm::Alarm(std::function<void()> fire, std::chrono::milliseconds poll)
    : fire_(std::move(fire)), poll_(std::max(poll, std::chrono::milliseconds(1))) {
    thread_ = std::thread([this] { loop(); });
}

Alarm::~Alarm() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void Alarm::arm(std::chrono::milliseconds after) {
    std::lock_guard<std::mutex> lk(mu_);
    deadline_ = std::chrono::steady_clock::now() + after;
    armed_ = true;
    fired_ = false;
}

bool Alarm::disarm() {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = false;
    return fired_;
}

void Alarm::loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, poll_, [this] { return stop_; })) {
        if (!armed_ || std::chrono::steady_clock::now() < deadline_) continue;
        armed_ = false;
        fired_ = true;
        fire_();  // under the lock: disarm waits for it
    }
}

}  // namespace strata

#include "engine/serve/request.h"

#include <iterator>

namespace strata {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::Cancelled: return "cancelled";
        case FinishReason::Error: return "error";
    }
    return "error";
}

void RequestStream::push(Event e) {
    bool wake = true;
    {
        std::lock_guard lk(mu_);
        if (e.kind == Event::Kind::Done) done_in_ = true;
        else wake = !done_only_ && !pacing_;
        events_.push_back(std::move(e));
    }
    if (wake) cv_.notify_all();
}

void RequestStream::wake_at_done() {
    std::lock_guard lk(mu_);
    done_only_ = true;
}

std::optional<Event> RequestStream::next(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return done_only_ ? done_in_ : !events_.empty(); });
    if (events_.empty()) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
}

std::vector<Event> RequestStream::take(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (gap_.count() > 0 && last_take_ != std::chrono::steady_clock::time_point{}) {
        pacing_ = true;
        cv_.wait_until(lk, last_take_ + gap_, [&] { return done_in_; });
        pacing_ = false;
    }
    cv_.wait_for(lk, timeout, [&] { return done_only_ ? done_in_ : !events_.empty(); });
    std::vector<Event> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
    events_.clear();
    if (!out.empty()) last_take_ = std::chrono::steady_clock::now();
    return out;
}

void RequestStream::pace(std::chrono::microseconds gap) {
    std::lock_guard lk(mu_);
    gap_ = gap;
}

}  // namespace strata

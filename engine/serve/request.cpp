#include "engine/serve/request.h"

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
        else wake = !done_only_;
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

}  // namespace strata

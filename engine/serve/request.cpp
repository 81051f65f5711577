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
    {
        std::lock_guard lk(mu_);
        events_.push_back(std::move(e));
    }
    cv_.notify_all();
}

std::optional<Event> RequestStream::next(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
}

}  // namespace strata

// libFuzzer target over what the server does with a request before the engine sees
// it: the framer (request_framer.h) on the bytes, fed in two pieces as a socket would
// deliver them, and the OpenAI body parser (parse.h) on the body. Anything but a clean
// frame or an ApiError is a finding: an escaping exception, a crash, a sanitizer
// report, or a frame whose forwarded bytes disagree with its end.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/parse.h"
#include "server/request_framer.h"

using namespace strata;
using namespace strata::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string all(reinterpret_cast<const char*>(data) + 1, size - 1);
    FramerLimits lim;
    lim.max_head = 4096;
    lim.max_headers = 32;
    lim.max_target = 1024;
    lim.max_body = 1 << 16;
    RequestFramer fr(lim);
    const size_t cut = all.empty() ? 0 : data[0] % (all.size() + 1);
    fr.feed(std::string_view(all).substr(0, cut));
    const Frame& f = fr.feed(all);
    if (f.state == Frame::State::Complete) {
        if (f.end > all.size() || f.forward.size() > f.end + 2) __builtin_trap();
        // The body as the parser gets it (for a chunked body the framing bytes too:
        // the parser must refuse them cleanly).
        const size_t head = f.forward.find("\r\n\r\n");
        const std::string body = head == std::string::npos ? std::string() : f.forward.substr(head + 4);
        for (const bool chat : {true, false}) {
            try {
                if (chat) parse_chat(body, SamplingParams{});
                else parse_completion(body, SamplingParams{});
            } catch (const ApiError&) {
            }
        }
    } else if (f.state == Frame::State::Failed) {
        if (f.status < 400 || f.status > 599 || f.message.empty()) __builtin_trap();
        (void)error_body(ApiError(f.status, f.message));
    }
    // Every body also straight to the parser: the JSON the framer would pass.
    try {
        parse_chat(all, SamplingParams{});
    } catch (const ApiError&) {
    }
    return 0;
}

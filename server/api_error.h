// Errors of the HTTP API. Handlers throw ApiError (or let EngineError and
// nlohmann::json errors escape); install_error_handling() turns every one of them, and
// httplib's own 404/413, into OpenAI's JSON shape in one place.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace strata::server {

class ApiError : public std::runtime_error {
public:
    ApiError(int status, const std::string& message, std::string param = {}, std::string code = {})
        : std::runtime_error(message), status(status), message(message), param(std::move(param)),
          code(std::move(code)) {}
    int status;
    std::string message;  // whole (what() stops at a NUL a JSON key may hold)
    std::string param, code;
};

// {"error": {"message", "type", "param", "code"}} with the status set.
void write_error(httplib::Response& res, const ApiError& e);
// Maps any exception to an ApiError (EngineError -> 400/503, others -> 500).
ApiError to_api_error(std::exception_ptr ep);
// The JSON body alone (for errors inside an SSE stream). Never throws: text that is
// not valid UTF-8 (a path, a key) is replaced, not refused.
std::string error_body(const ApiError& e) noexcept;

// allowed(path): the methods a known route takes ("GET, POST"), empty for an unknown
// path; a known path asked with another method gets 405 with Allow.
void install_error_handling(httplib::Server& svr, size_t max_body,
                            std::function<std::string(const std::string& path)> allowed);

}  // namespace strata::server

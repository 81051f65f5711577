#include "server/api_error.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/engine.h"

namespace strata::server {

static const char* type_of(int status) {
    if (status == 401) return "authentication_error";
    if (status == 404) return "not_found_error";
    if (status == 503) return "unavailable_error";
    // 501/505: a transfer coding or HTTP version the client chose.
    if ((status >= 400 && status < 500) || status == 501 || status == 505) return "invalid_request_error";
    return "server_error";
}

std::string error_body(const ApiError& e) noexcept {
    try {
        nlohmann::json j = {{"error",
                             {{"message", e.message},
                              {"type", type_of(e.status)},
                              {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
                              {"code", e.code.empty() ? nlohmann::json() : nlohmann::json(e.code)}}}};
        return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (...) {  // allocation failure: a fixed body still has the shape
        return R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})";
    }
}

void write_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", "1");
    res.set_content(error_body(e), "application/json");
}

ApiError to_api_error(std::exception_ptr ep) {
    try {
        std::rethrow_exception(ep);
    } catch (const ApiError& e) {
        return e;
    } catch (const EngineError& e) {
        switch (e.kind) {
            case EngineError::Kind::Invalid: return ApiError(400, e.what(), e.param);
            case EngineError::Kind::Busy: return ApiError(503, e.what(), {}, "queue_full");
            case EngineError::Kind::Unavailable: return ApiError(503, e.what(), {}, "unavailable");
        }
    } catch (const nlohmann::json::exception& e) {
        // A type read without checking first: the library's text names its internals
        // (exception ids, iterator types), so the client gets a plain one.
        spdlog::warn("request JSON: {}", e.what());
        return ApiError(400, "invalid request: a field has the wrong type or value");
    } catch (const std::exception& e) {
        return ApiError(500, e.what());
    } catch (...) {
    }
    return ApiError(500, "unknown error");
}

void install_error_handling(httplib::Server& svr, size_t max_body,
                            std::function<std::string(const std::string& path)> allowed) {
    svr.set_payload_max_length(max_body);
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
            write_error(res, to_api_error(ep));
        } catch (...) {
            res.status = 500;
            res.body = error_body(ApiError(500, "internal error"));
        }
    });
    // httplib's own errors (no route, body too large) arrive here with an empty body.
    svr.set_error_handler(httplib::Server::HandlerWithResponse(
        [max_body, allowed = std::move(allowed)](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            try {
                if (res.status == 404) {
                    const std::string methods = allowed(req.path);
                    if (methods.empty()) {
                        write_error(res, ApiError(404, "unknown route: " + req.method + " " + req.path));
                    } else {
                        write_error(res, ApiError(405, fmt::format("{} takes {}, not {}", req.path, methods, req.method)));
                        res.set_header("Allow", methods);
                    }
                } else if (res.status == 413) {
                    write_error(res, ApiError(413, "the request body is over the limit of " + std::to_string(max_body) +
                                                       " bytes (--max-body)"));
                } else {
                    write_error(res, ApiError(res.status, fmt::format("HTTP error {}", res.status)));
                }
            } catch (...) {
                res.body = error_body(ApiError(500, "internal error"));
            }
            return httplib::Server::HandlerResponse::Handled;
        }));
}

}  // namespace strata::server

#include "server/api_error.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace strata::server {

static const char* type_of(int status) {
    switch (status) {
        case 400: case 413: return "invalid_request_error";
        case 401: return "authentication_error";
        case 404: return "not_found_error";
        case 503: return "unavailable_error";
        default: return "server_error";
    }
}

std::string error_body(const ApiError& e) {
    nlohmann::json j = {{"error",
                         {{"message", e.what()},
                          {"type", type_of(e.status)},
                          {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
                          {"code", e.code.empty() ? nlohmann::json() : nlohmann::json(e.code)}}}};
    return j.dump();
}

void write_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
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
    } catch (const nlohmann::json::exception& e) {  // a type we read without checking first
        return ApiError(400, std::string("invalid request: ") + e.what());
    } catch (const std::exception& e) {
        return ApiError(500, e.what());
    } catch (...) {
    }
    return ApiError(500, "unknown error");
}

void install_error_handling(httplib::Server& svr, size_t max_body) {
    svr.set_payload_max_length(max_body);
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        write_error(res, to_api_error(ep));
    });
    // httplib's own errors (no route, body too large) arrive here with an empty body.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req,
                                                                          httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 404) write_error(res, ApiError(404, "unknown route: " + req.method + " " + req.path));
        else if (res.status == 413)
            write_error(res, ApiError(413, "the request body is over the limit of " + std::to_string(max_body) +
                                                " bytes (--max-body)"));
        else write_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status)));
        return httplib::Server::HandlerResponse::Handled;
    }));
}

}  // namespace strata::server

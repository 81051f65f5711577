#include "engine/backend/op_profile.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include <fmt/format.h>

namespace strata {

void OpProfile::add(const char* op, int64_t rows, std::string what, Clock::duration took) {
    Sum& s = sums_[{op, rows, std::move(what)}];
    ++s.calls;
    s.took += took;
}

std::string OpProfile::report() const {
    using Row = std::pair<const std::tuple<std::string, int64_t, std::string>*, const Sum*>;
    std::vector<Row> rows;
    double total_ms = 0;
    for (const auto& [key, sum] : sums_) {
        rows.emplace_back(&key, &sum);
        total_ms += std::chrono::duration<double, std::milli>(sum.took).count();
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.second->took > b.second->took; });
    std::string out = fmt::format("  {:<22} {:>5} {:>14} {:>9} {:>10} {:>9} {:>6}\n", "op", "rows", "weight", "calls",
                                  "total ms", "us/call", "share");
    for (const auto& [key, sum] : rows) {
        const double ms = std::chrono::duration<double, std::milli>(sum->took).count();
        const auto& [op, n_rows, what] = *key;
        out += fmt::format("  {:<22} {:>5} {:>14} {:>9} {:>10.1f} {:>9.2f} {:>5.1f}%\n", op, n_rows, what, sum->calls, ms,
                           1e3 * ms / static_cast<double>(sum->calls), total_ms > 0 ? 100.0 * ms / total_ms : 0.0);
    }
    out += fmt::format("  all ops: {:.1f} ms\n", total_ms);
    return out;
}

}  // namespace strata

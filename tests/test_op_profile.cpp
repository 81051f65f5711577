// STRATA_CPU_PROFILE (engine/backend/op_profile.h): the table a CPU device keeps of its
// ops, and that an off profile keeps nothing.
#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/cpu_ops.h"
#include "engine/backend/op_profile.h"
#include "engine/model/model.h"
#include "tests/model_helpers.h"

using namespace strata;

namespace {

// The report's lines as whitespace-separated fields.
std::vector<std::vector<std::string>> fields(const std::string& report) {
    std::vector<std::vector<std::string>> out;
    std::istringstream lines(report);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        out.emplace_back();
        for (std::string w; words >> w;) out.back().push_back(w);
    }
    return out;
}

}  // namespace

TEST_CASE("op profile: calls and time per op and row count, the largest total first", "[profile]") {
    OpProfile p;
    using ms = std::chrono::milliseconds;
    p.add("matmul", 4, "512x1024 q8_0", ms(3));
    p.add("matmul", 4, "512x1024 q8_0", ms(5));
    p.add("matmul", 1, "512x1024 q8_0", ms(1));
    p.add("rms_norm", 4, "", ms(2));
    const std::string r = p.report();
    INFO(r);
    // Each line's fields; matmul over 4 rows: 2 calls, 8 ms, 4000 us a call, 8 of the 11 ms.
    const auto lines = fields(r);
    REQUIRE(lines.size() == 5);
    CHECK(lines[1] == std::vector<std::string>{"matmul", "4", "512x1024", "q8_0", "2", "8.0", "4000.00", "72.7%"});
    CHECK(lines[2] == std::vector<std::string>{"rms_norm", "4", "1", "2.0", "2000.00", "18.2%"});
    CHECK(lines[3] == std::vector<std::string>{"matmul", "1", "512x1024", "q8_0", "1", "1.0", "1000.00", "9.1%"});
    CHECK(r.find("all ops: 11.0 ms") != std::string::npos);
}

TEST_CASE("op profile: a CPU device times its ops only when asked", "[profile]") {
    auto m = Model::load(test::to_file(test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 4)));
    ThreadPool pool(2);
    CpuOps ops(pool);
    const std::vector<int32_t> toks = {3, 1, 4, 1, 5};
    std::vector<float> logits(toks.size() * static_cast<size_t>(m->hp().n_vocab));
    {
        ForwardCtx ctx(ops, *m);
        SeqState s = m->new_state(ctx.ops, 32, GgmlType::F16);
        m->eval(ctx, s, toks, logits.data(), true);
    }
    CHECK(ops.profile().empty());
    ops.set_profile(true);
    {
        ForwardCtx ctx(ops, *m);
        SeqState s = m->new_state(ctx.ops, 32, GgmlType::F16);
        m->eval(ctx, s, toks, logits.data(), true);
    }
    const std::string r = ops.profile();
    INFO(r);
    // A five-token window through a hybrid: its products by weight, its recurrent and
    // attention layers, all of five rows.
    CHECK(r.find("matmul_multi               5") != std::string::npos);
    CHECK(r.find("moe_experts                5") != std::string::npos);
    CHECK(r.find("attention                  5") != std::string::npos);
    CHECK(r.find(" q8_0 ") != std::string::npos);
    CHECK(r.find("all ops:") != std::string::npos);
    ops.set_profile(false);
    CHECK(ops.profile().empty());
}

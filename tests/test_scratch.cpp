// The forward pass's buffers (Scratch, engine/model/model.h): taken in order inside
// frames that give them back, the same addresses for the same sequence of requests (a
// window of the same shape), never moved while in use, and a whole window of a model
// run twice on them gives the same logits.
#include <catch2/catch.hpp>

#include <cstring>

#include "engine/backend/cpu_ops.h"
#include "engine/model/model.h"
#include "tests/model_helpers.h"

using namespace strata;

TEST_CASE("scratch: frames give buffers back, a repeated shape gets the same addresses", "[model][scratch]") {
    Scratch s(host_buffer);
    float *a1 = nullptr, *b1 = nullptr, *c1 = nullptr;
    {
        const Scratch::Frame outer(s);
        a1 = s.floats(100);
        {
            const Scratch::Frame inner(s);
            b1 = s.floats(3);
            CHECK(b1 != a1);
            CHECK(reinterpret_cast<uintptr_t>(b1) % 64 == 0);
        }
        c1 = s.floats(5);
        CHECK(c1 == b1);  // the inner frame's memory was given back
        std::memset(a1, 1, 100 * sizeof(float));
    }
    {
        const Scratch::Frame again(s);
        CHECK(s.floats(100) == a1);  // same requests, same addresses
        // A request larger than what is left takes new memory; the earlier buffers stay put.
        float* big = s.floats(size_t{3} << 20);
        CHECK(big != a1);
        big[(size_t{3} << 20) - 1] = 1.0f;
    }
    const size_t cap = s.capacity();
    {
        const Scratch::Frame f(s);
        CHECK(s.floats(100) == a1);
        s.floats(size_t{3} << 20);
    }
    CHECK(s.capacity() == cap);  // the deepest window's memory is reused, not grown again
}

TEST_CASE("scratch: a model's windows on one context repeat bit for bit", "[model][scratch]") {
    auto m = Model::load(test::to_file(test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 4)));
    ThreadPool pool(2);
    CpuOps cpu_ops(pool);
    ForwardCtx ctx(cpu_ops, *m);
    const std::vector<int32_t> toks = {3, 1, 4, 1, 5, 9, 2, 6};
    std::vector<float> a(toks.size() * static_cast<size_t>(m->hp().n_vocab)), b(a.size());
    SeqState s1 = m->new_state(ctx.ops, 32, GgmlType::F16), s2 = m->new_state(ctx.ops, 32, GgmlType::F16);
    m->eval(ctx, s1, toks, a.data(), true);
    const size_t cap = ctx.scratch.capacity();
    m->eval(ctx, s2, toks, b.data(), true);
    CHECK(a == b);
    CHECK(ctx.scratch.capacity() == cap);  // the second window of the same shape took nothing new
}

#include "engine/synth/predictable.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/quant/quant.h"
#include "engine/synth/rng.h"
#include "engine/synth/vocab.h"

namespace strata::synth {
namespace {

// Head rows of tokens outside the cycle (specials, reserved padding): random, but
// small, so that their logits (about N(0, 0.1^2)) never beat a cycle token's, even
// after a special input token: greedy decoding never leaves the cycle, never ends.
constexpr double kOffRowScale = 0.1;

// Fisher-Yates with our own generator (std::shuffle's algorithm is unspecified). The
// modulo bias of next() % n (below 2^-40 for these n) does not matter.
void shuffle(std::vector<int32_t>& v, Rng& rng) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.next() % i]);
}

double rms(const double* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
    return std::sqrt(s / static_cast<double>(n));
}

// A tensor of n_rows rows of row_len values in the plan's type: fill(r, row) gives
// row r in float; back(r, values), when set, receives the row as the model will read
// it (dequantized), which is what the head rows are computed from.
std::vector<uint8_t> encode_rows(GgmlType type, int64_t row_len, int64_t n_rows,
                                 const std::function<void(int64_t, float*)>& fill,
                                 const std::function<void(int64_t, const float*)>& back = {}) {
    const size_t rb = row_bytes(type, row_len);
    std::vector<uint8_t> out(rb * static_cast<size_t>(n_rows));
    std::vector<float> row(static_cast<size_t>(row_len)), deq(static_cast<size_t>(row_len));
    for (int64_t r = 0; r < n_rows; ++r) {
        uint8_t* dst = out.data() + rb * static_cast<size_t>(r);
        fill(r, row.data());
        encode_row(type, row.data(), dst, row_len);
        if (back) {
            dequantize_row(type, dst, deq.data(), row_len);
            back(r, deq.data());
        }
    }
    return out;
}

// Runs a and b, on two threads when allowed; exceptions reach the caller.
void both(int threads, const std::function<void()>& a, const std::function<void()>& b) {
    if (threads < 2) {
        a();
        b();
        return;
    }
    auto fa = std::async(std::launch::async, a);
    b();
    fa.get();
}

}  // namespace

PredictableMap predictable_map(const ModelConfig& c, uint64_t seed) {
    STRATA_CHECK(c.mtp_agree && *c.mtp_agree >= 0.0 && *c.mtp_agree <= 1.0, "not a predictable model config");
    const SynthVocab vocab = build_vocab(c.n_vocab);
    PredictableMap p;
    for (size_t t = 0; t < vocab.types.size(); ++t)
        if (vocab.types[t] == kNormal) p.cycle.push_back(static_cast<int32_t>(t));
    const size_t n = p.cycle.size();  // >= 256: the byte tokens
    Rng rc(tensor_seed(seed, "strata.predictable.cycle"));
    shuffle(p.cycle, rc);
    // One cycle through every ordinary token: a greedy run of any length below n
    // visits new tokens only, so its acceptance samples B without repeats.
    p.next.assign(static_cast<size_t>(c.n_vocab), -1);
    for (size_t i = 0; i < n; ++i) p.next[p.cycle[i]] = p.cycle[(i + 1) % n];

    // B: a random (1 - A) of the cycle; sigma moves each b_i to b_{i+1} (cyclically in
    // B's random order), so g = f o sigma differs from f exactly on B and is still a
    // permutation (every head row then has one source and the full margin). One token
    // cannot be deranged, so |B| = 1 becomes 2. B for a higher A is a subset of B for a
    // lower one (same order, shorter prefix).
    std::vector<int32_t> b = p.cycle;
    Rng rb(tensor_seed(seed, "strata.predictable.disagree"));
    shuffle(b, rb);
    auto k = static_cast<size_t>(std::llround((1.0 - *c.mtp_agree) * static_cast<double>(n)));
    if (k == 1) k = 2;
    b.resize(k);
    p.mtp_next = p.next;
    for (size_t i = 0; i < k; ++i) p.mtp_next[b[i]] = p.next[b[(i + 1) % k]];
    p.n_disagree = static_cast<int64_t>(k);
    return p;
}

void make_predictable(SynthModel& m, uint64_t seed, int threads) {
    const ModelConfig& c = m.config;
    STRATA_CHECK(c.hybrid() && c.mtp && c.mtp_agree,
                 "make_predictable: needs a qwen3next / qwen35 config with an MTP block and mtp_agree");
    const PredictableMap map = predictable_map(c, seed);
    const auto E = static_cast<size_t>(c.n_embd), V = static_cast<size_t>(c.n_vocab);
    const size_t n = map.cycle.size();
    const std::string nextn = fmt::format("blk.{}.nextn.", c.n_layer);

    auto index = [&](const std::string& name) {
        for (size_t i = 0; i < m.tensors.size(); ++i)
            if (m.tensors[i].name == name) return i;
        fail("make_predictable: the plan has no tensor {}", name);
    };
    auto norm = [&](const std::string& name) {  // an F32 [n_embd] norm weight, already generated
        const size_t i = index(name);
        STRATA_CHECK(m.tensors[i].type == GgmlType::F32 && m.data[i].size() == E * 4,
                     "make_predictable: {} is not an F32 vector of {}", name, E);
        std::vector<float> w(E);
        std::memcpy(w.data(), m.data[i].data(), E * 4);
        return std::vector<double>(w.begin(), w.end());
    };
    const std::vector<double> out_norm = norm("output_norm.weight"), enorm = norm(nextn + "enorm.weight"),
                              head_norm = norm(nextn + "shared_head_norm.weight");
    const size_t i_embd = index("token_embd.weight"), i_out = index("output.weight"),
                 i_eh = index(nextn + "eh_proj.weight"), i_head = index(nextn + "shared_head_head.weight");

    // Position of each token in the cycle (-1: outside it).
    std::vector<int64_t> slot(V, -1);
    for (size_t i = 0; i < n; ++i) slot[map.cycle[i]] = static_cast<int64_t>(i);

    // 1. The embedding (RMS kEmbedScale) and eh_proj = [W_e | W_h]: W_e of scale
    //    kEmbedScale / sqrt(n_embd) over the enorm(embedding) half, so the MTP stream
    //    starts near RMS kEmbedScale, and an ordinary N(0, 1/n_embd) W_h over the hidden
    //    half (about 1/kEmbedScale of the stream). Kept for step 2: the dequantized
    //    embeddings of the cycle tokens and W_e.
    std::vector<double> emb(n * E);  // [n, E] by cycle slot
    std::vector<double> we(E * E);   // [E out, E in] W_e
    const double inv_sqrt_e = 1.0 / std::sqrt(static_cast<double>(E));
    both(
        threads,
        [&] {
            Rng rng(tensor_seed(seed, "token_embd.weight"));
            m.data[i_embd] = encode_rows(
                m.tensors[i_embd].type, c.n_embd, c.n_vocab,
                [&](int64_t, float* row) {
                    for (size_t j = 0; j < E; ++j) row[j] = static_cast<float>(kEmbedScale * rng.normal());
                },
                [&](int64_t r, const float* row) {
                    if (const int64_t s = slot[static_cast<size_t>(r)]; s >= 0)
                        std::copy(row, row + E, emb.begin() + s * c.n_embd);
                });
        },
        [&] {
            Rng rng(tensor_seed(seed, nextn + "eh_proj.weight"));
            m.data[i_eh] = encode_rows(
                m.tensors[i_eh].type, 2 * c.n_embd, c.n_embd,
                [&](int64_t, float* row) {
                    for (size_t j = 0; j < 2 * E; ++j)
                        row[j] = static_cast<float>((j < E ? kEmbedScale : 1.0) * inv_sqrt_e * rng.normal());
                },
                [&](int64_t r, const float* row) { std::copy(row, row + E, we.begin() + r * c.n_embd); });
        });

    // 2. The heads. A target z is the direction of the hidden the head sees after input
    //    token u (main: output_norm(e_u); MTP: shared_head_norm(W_e enorm(e_u))); the
    //    row of the token to predict is z at unit RMS / sqrt(n_embd), the scale of an
    //    ordinary random head, so its logit is about sqrt(n_embd) and the rest N(0, 1).
    auto head = [&](size_t ti, const std::vector<int32_t>& to, const std::function<void(size_t, double*)>& target) {
        std::vector<int64_t> src(V, -1);  // row v: the cycle slot of the token u with to[u] = v
        for (size_t i = 0; i < n; ++i) src[static_cast<size_t>(to[map.cycle[i]])] = static_cast<int64_t>(i);
        Rng rng(tensor_seed(seed, m.tensors[ti].name));
        std::vector<double> z(E);
        m.data[ti] = encode_rows(m.tensors[ti].type, c.n_embd, c.n_vocab, [&](int64_t v, float* row) {
            if (const int64_t s = src[static_cast<size_t>(v)]; s >= 0) {
                target(static_cast<size_t>(s), z.data());
                const double k = inv_sqrt_e / rms(z.data(), c.n_embd);
                for (size_t j = 0; j < E; ++j) row[j] = static_cast<float>(k * z[j]);
            } else {
                for (size_t j = 0; j < E; ++j) row[j] = static_cast<float>(kOffRowScale * inv_sqrt_e * rng.normal());
            }
        });
    };
    both(
        threads,
        [&] {
            head(i_out, map.next, [&](size_t s, double* z) {
                const double* e = emb.data() + s * E;
                for (size_t j = 0; j < E; ++j) z[j] = e[j] * out_norm[j];
            });
        },
        [&] {
            std::vector<double> a(E);
            head(i_head, map.mtp_next, [&](size_t s, double* z) {
                const double* e = emb.data() + s * E;
                const double r = rms(e, c.n_embd);
                for (size_t j = 0; j < E; ++j) a[j] = e[j] / r * enorm[j];
                for (size_t o = 0; o < E; ++o) {
                    const double* w = we.data() + o * E;
                    double acc = 0;
                    for (size_t j = 0; j < E; ++j) acc += w[j] * a[j];
                    z[o] = acc * head_norm[o];
                }
            });
        });
}

}  // namespace strata::synth

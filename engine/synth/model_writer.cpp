#include "engine/synth/model_writer.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/quant/quant.h"
#include "engine/synth/predictable.h"
#include "engine/synth/rng.h"
#include "engine/synth/vocab.h"

namespace strata::synth {

ModelConfig config_for(const SynthOptions& o) {
    ModelConfig c = make_config(o.arch, o.preset, o.vocab_size);
    if (o.layers > 0) c.n_layer = o.layers;
    if (o.mtp && !c.hybrid()) fail("--mtp is only available for --arch qwen3next, qwen35 and qwen35moe");
    c.mtp = o.mtp;
    c.rope_freqs = o.rope_freqs;
    c.yarn_factor = o.yarn_factor;
    c.gdn_layout = o.gdn_layout;
    if (o.mtp_agree) {
        if (!c.hybrid() || !o.mtp) fail("--mtp-agree is only available for --arch qwen3next, qwen35 and qwen35moe with --mtp");
        c.mtp_agree = o.mtp_agree;
    }
    return c;
}

namespace {

// One value of the tensor's distribution (see Init); mat_scale = 1/sqrt(ne[0]) (times the
// residual factor for ResidOut). Computed in double, rounded to float once.
float draw(Init init, Rng& rng, double mat_scale) {
    switch (init) {
        case Init::Matrix:
        case Init::ResidOut: return static_cast<float>(rng.normal() * mat_scale);
        case Init::Embedding: return static_cast<float>(rng.normal());
        case Init::Norm: return static_cast<float>(1.0 + 0.02 * rng.normal());
        case Init::SsmA: return static_cast<float>(-std::exp(rng.uniform(0.0, std::log(16.0))));
        case Init::SsmDtBias: {
            const double dt = std::exp(rng.uniform(std::log(1e-3), std::log(1e-1)));
            return static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus^-1(dt)
        }
        case Init::Conv: return static_cast<float>(rng.uniform(-mat_scale, mat_scale));  // ne[0] = K
        case Init::RopeFreqs: return static_cast<float>(std::exp(rng.uniform(0.0, std::log(8.0))));
        case Init::Derived: break;  // generate_tensor refuses it
    }
    return 0.0f;
}

}  // namespace

void encode_row(GgmlType type, const float* src, uint8_t* dst, int64_t n) {
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_fp16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return;
        default: quantize_row(type, src, dst, n);
    }
}

std::vector<uint8_t> generate_tensor(const TensorPlan& t, const ModelConfig& c, uint64_t seed) {
    STRATA_CHECK(t.init != Init::Derived, "{} is derived from other tensors (predictable.h), not drawn", t.name);
    const int64_t row_len = t.ne[0];
    const int64_t n_rows = t.n_elements() / row_len;
    const size_t rb = row_bytes(t.type, row_len);
    double scale = 1.0 / std::sqrt(static_cast<double>(row_len));  // 1/sqrt(fan_in)
    // GPT-2 style: each of the 2 residual writes per block adds variance; scaling them
    // keeps the residual stream's RMS near 1 through the whole stack.
    if (t.init == Init::ResidOut) scale /= std::sqrt(2.0 * static_cast<double>(c.n_block()));

    Rng rng(tensor_seed(seed, t.name));
    std::vector<uint8_t> out(rb * static_cast<size_t>(n_rows));
    std::vector<float> row(static_cast<size_t>(row_len));
    for (int64_t r = 0; r < n_rows; ++r) {
        for (auto& v : row) v = draw(t.init, rng, scale);
        encode_row(t.type, row.data(), out.data() + rb * static_cast<size_t>(r), row_len);
    }
    return out;
}

SynthModel build_model(const SynthOptions& o) { return build_model(config_for(o), o.type, o.seed, o.threads); }

SynthModel build_model(const ModelConfig& c, GgmlType type, uint64_t seed, int threads) {
    const TypeInfo& ti = type_info(type);
    if (!ti.supported || !llama_file_type(type))
        fail("type {} cannot be used for weights (no quantizer, or not a weight format)", ti.name);

    SynthModel m;
    m.config = c;
    ModelPlan plan = plan_tensors(c, type);
    m.tensors = std::move(plan.tensors);
    m.notes = std::move(plan.notes);
    bool any_quantized = false;
    for (const auto& t : m.tensors) {
        m.n_params += t.n_elements();
        any_quantized = any_quantized || type_info(t.type).quantized;
    }
    const SynthVocab vocab = build_vocab(c.n_vocab);
    m.n_learned_tokens = vocab.n_learned;
    m.metadata = model_metadata(c, type, any_quantized, seed);
    for (auto& kv : tokenizer_metadata(vocab)) m.metadata.push_back(std::move(kv));

    // Workers pull tensor indices from a shared counter; each tensor's bytes depend
    // only on (seed, name), so the schedule cannot change the output.
    m.data.resize(m.tensors.size());
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mu;
    auto work = [&] {
        for (size_t i; (i = next.fetch_add(1)) < m.tensors.size();) {
            try {
                if (m.tensors[i].init != Init::Derived) m.data[i] = generate_tensor(m.tensors[i], c, seed);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mu);
                if (!error) error = std::current_exception();
                next = m.tensors.size();
            }
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < std::max(threads, 1); ++t) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
    if (error) std::rethrow_exception(error);
    if (c.mtp_agree) make_predictable(m, seed, threads);
    return m;
}

GgufWriter make_writer(SynthModel&& m) {
    GgufWriter w;
    for (auto& [k, v] : m.metadata) w.set(k, std::move(v));
    for (size_t i = 0; i < m.tensors.size(); ++i) {
        auto& t = m.tensors[i];
        w.add_tensor(t.name, t.type, t.ne, std::move(m.data[i]));
    }
    m.data.clear();
    return w;
}

std::pair<GgufWriter, GgufWriter> make_writers_mtp_apart(SynthModel&& m) {
    STRATA_CHECK(m.config.mtp, "the model has no MTP block to write apart");
    const std::string A = std::string(arch_name(m.config.arch)) + ".";
    const std::string block = "blk." + std::to_string(m.config.n_layer) + ".";
    GgufWriter main, side;
    for (auto& [k, v] : m.metadata) {
        side.set(k, v);
        if (k == A + "nextn_predict_layers") continue;
        if (k == A + "block_count") main.set(k, GgufValue::u32(static_cast<uint32_t>(m.config.n_layer)));
        else main.set(k, std::move(v));
    }
    for (size_t i = 0; i < m.tensors.size(); ++i) {
        const auto& t = m.tensors[i];
        const bool mtp = t.name.rfind(block, 0) == 0;
        const bool shared = t.name == "token_embd.weight" || t.name == "output.weight" || t.name == "output_norm.weight";
        if (mtp || shared) side.add_tensor(t.name, t.type, t.ne, m.data[i]);
        if (!mtp) main.add_tensor(t.name, t.type, t.ne, std::move(m.data[i]));
    }
    m.data.clear();
    return {std::move(main), std::move(side)};
}

}  // namespace strata::synth

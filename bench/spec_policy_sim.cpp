// The default speculation policy (engine/speculative/spec_policy.h) on a simulated clock:
// how close its K comes to the best fixed K, without the noise of a real machine's clock.
//
// A request of N tokens decodes as generate() drives the policy: a plain step (a probe,
// or paused) costs one plain step's time; a window of K drafts costs (a + b K) plain steps
// (the first window of a request `first` times that: buffers allocated, caches cold),
// each time scaled by a random factor in [1 - noise, 1 + noise], and keeps each draft
// with probability p given the ones before it (the chain stops at the first rejection).
// For each agreement p and request length it prints the tokens per plain-step time of
// the default, of each fixed K (with the same first-window cost, no probes), and the
// default's share of the best fixed K, as means over many seeded requests.
//
// With --carry the requests of a cell run one after another as a server's do, each
// weighing its probes against the one-draft window cost the one before it measured
// (SpecPolicyParams::window_cost_k1); without it each starts knowing nothing, as
// `strata run` does.
//
// usage: spec_policy_sim [--a A] [--b B] [--first F] [--noise X] [--requests R]
//                        [--tokens "128 512"] [--p "0.6 0.75 0.9 0.98"] [--carry 1]
// The defaults are the costs traced on the MoE preset on a 2-core AMD EPYC (2026-12-07,
// docs/spec.md "The default K"): a K-window 1.0 + 0.45 K plain steps, the first 8 times
// a window's cost.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/speculative/spec_policy.h"

using namespace strata;

namespace {

struct Sim {
    double a = 1.0, b = 0.45, first = 8.0, noise = 0.1;
};

std::vector<double> parse_list(const std::string& s) {
    std::vector<double> v;
    std::istringstream in(s);
    for (double x; in >> x;) v.push_back(x);
    return v;
}

// Tokens per plain step of one request of n tokens; k_fixed > 0 runs that K without the
// policy's probes and trials.
double run(const Sim& s, double p, int64_t n, int k_fixed, uint64_t seed, int* k_end = nullptr, double* carry = nullptr) {
    std::mt19937_64 rng(seed);
    std::bernoulli_distribution keep(p);
    std::uniform_real_distribution<double> jitter(1 - s.noise, 1 + s.noise);
    SpecPolicyParams prm;
    prm.k_max = k_fixed > 0 ? 0 : kAdaptiveMaxSpecK;
    if (carry) prm.window_cost_k1 = *carry;
    SpecPolicy pol(k_fixed > 0 ? k_fixed : kDefaultSpecK, k_fixed == 0, prm, /*greedy=*/true);
    const double plain = 1e-3;  // seconds of a plain step: the unit
    double t = 0;
    int64_t done = 1;  // the prompt's logits give the first token
    bool first = true;
    while (done < n) {
        const int k = static_cast<int>(std::min<int64_t>(pol.next_k(), n - done));
        if (k == 0) {
            const bool probe = pol.probe();
            const double dt = plain * jitter(rng);
            t += dt;
            pol.on_plain(dt);
            if (probe) pol.on_probe(keep(rng));
            ++done;
            continue;
        }
        int64_t m = 0;
        while (m < k && keep(rng)) ++m;
        const double dt = plain * (s.a + s.b * k) * (first ? s.first : 1.0) * jitter(rng);
        first = false;
        t += dt;
        pol.on_window(k, m, dt);
        done += m + 1;
    }
    if (k_end) *k_end = pol.k();
    if (carry && pol.window_cost(1) > 0) *carry = pol.window_cost(1);
    return static_cast<double>(n - 1) / (t / plain);
}

}  // namespace

int main(int argc, char** argv) {
    Sim s;
    int requests = 400;
    bool carry = false;
    std::vector<double> lens{128, 512}, ps{0.6, 0.75, 0.9, 0.98};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (!v) {
            std::fprintf(stderr, "usage: spec_policy_sim [--a A] [--b B] [--first F] [--noise X] [--requests R] [--tokens LIST] [--p LIST] [--carry 0|1]\n");
            return 2;
        }
        ++i;
        if (a == "--a") s.a = std::atof(v);
        else if (a == "--b") s.b = std::atof(v);
        else if (a == "--first") s.first = std::atof(v);
        else if (a == "--noise") s.noise = std::atof(v);
        else if (a == "--requests") requests = std::atoi(v);
        else if (a == "--tokens") lens = parse_list(v);
        else if (a == "--p") ps = parse_list(v);
        else if (a == "--carry") carry = std::atoi(v) != 0;
        else {
            std::fprintf(stderr, "spec_policy_sim: unknown flag %s\n", a.c_str());
            return 2;
        }
    }
    std::printf("windows of K drafts cost %.2f + %.2f K plain steps (the first %.1fx), time noise +-%.0f%%, %d requests each%s\n\n",
                s.a, s.b, s.first, 100 * s.noise, requests,
                carry ? ", each after the one before it (its window cost carried)" : "");
    std::printf("| p | tokens | default | K = 1 | K = 2 | K = 3 | K = 4 | K = 5 | K = 6 | K = 7 | K = 8 | best fixed | default / best | default's K at the end |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|\n");
    for (double p : ps)
        for (double len : lens) {
            const auto n = static_cast<int64_t>(len);
            double def = 0;
            std::vector<int> ends(kAdaptiveMaxSpecK + 1, 0);
            double cost_k1 = 0;  // --carry: what the request before measured
            for (int r = 0; r < requests; ++r) {
                int k_end = 0;
                def += run(s, p, n, 0, 1000 + static_cast<uint64_t>(r), &k_end, carry ? &cost_k1 : nullptr);
                ++ends[static_cast<size_t>(k_end)];
            }
            def /= requests;
            double fixed[kAdaptiveMaxSpecK + 1] = {};
            int best = 1;
            for (int k = 1; k <= kAdaptiveMaxSpecK; ++k) {
                for (int r = 0; r < requests; ++r) fixed[k] += run(s, p, n, k, 1000 + static_cast<uint64_t>(r));
                fixed[k] /= requests;
                if (fixed[k] > fixed[best]) best = k;
            }
            std::string hist;
            for (int k = 1; k <= kAdaptiveMaxSpecK; ++k)
                if (const int e = ends[static_cast<size_t>(k)]) {  // appended piece by piece: GCC 12 warned (-Wrestrict) of a + chain
                    hist += std::to_string(k);
                    hist += ':';
                    hist += std::to_string(e);
                    hist += ' ';
                }
            std::printf("| %.2f | %lld | %.3f |", p, static_cast<long long>(n), def);
            for (int k = 1; k <= kAdaptiveMaxSpecK; ++k) std::printf(" %.3f |", fixed[k]);
            std::printf(" K = %d | %.3f | %s|\n", best, def / fixed[best], hist.c_str());
        }
    return 0;
}

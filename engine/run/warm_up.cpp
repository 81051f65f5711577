#include "engine/run/warm_up.h"

#include <chrono>
#include <vector>

namespace strata {

double warm_up(Runner& r, std::span<const int> seqs, int32_t token) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t E = static_cast<size_t>(r.model().hp().n_embd), V = static_cast<size_t>(r.model().hp().n_vocab);
    const bool mtp = r.has_mtp();
    const int32_t tok[1] = {token};
    std::vector<float> hidden(mtp ? seqs.size() * E : 0), logits(seqs.size() * V);
    std::vector<Runner::Item> items;
    for (size_t i = 0; i < seqs.size(); ++i)
        items.push_back({seqs[i], std::span<const int32_t>(tok, 1), false, mtp ? hidden.data() + i * E : nullptr});
    struct Reset {  // however the window ends
        Runner& r;
        std::span<const int> seqs;
        ~Reset() {
            for (int s : seqs) r.reset_sequence(s);
        }
    } reset{r, seqs};
    r.eval(items, logits.data());
    if (mtp)
        for (size_t i = 0; i < seqs.size(); ++i) r.mtp(seqs[i], hidden.data() + i * E, tok, 1, 0, logits.data(), nullptr, 0);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace strata

// Kernel times for STRATA_GPU_PROFILE (profiler.h), and the gpu.h calls around them.
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

thread_local Profiler* t_profiler = nullptr;

void check(gpuError_t e, const char* what) {
    if (e != gpuSuccess) fail("{} failed: {}", what, gpuGetErrorString(e));
}

// "matmul_q_k<(strata::GgmlType)12, 2>" from the kernel's symbol: no namespaces, no
// return type, no parameter list.
std::string short_name(std::string s) {
    for (const char* drop : {"(anonymous namespace)::", "strata::gpu::", "strata::"}) {
        for (size_t i = s.find(drop); i != std::string::npos; i = s.find(drop)) s.erase(i, std::string(drop).size());
    }
    if (s.rfind("void ", 0) == 0) s.erase(0, 5);
    int depth = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '<') ++depth;
        if (s[i] == '>') --depth;
        if (s[i] == '(' && depth == 0 && i > 0) return s.substr(0, i);
    }
    return s;
}

std::string kernel_name(const void* kernel) {
    const char* mangled = nullptr;
#if defined(STRATA_GPU_CUDA)
    if (cudaFuncGetName(&mangled, kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        mangled = nullptr;
    }
#endif
    Dl_info info{};
    if (!mangled && dladdr(kernel, &info) != 0) mangled = info.dli_sname;
    if (!mangled) return fmt::format("kernel at {}", kernel);
    int status = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string out = status == 0 && d ? d : mangled;
    std::free(d);
    return short_name(out);
}

}  // namespace

Profiler* profiler_of(gpuStream_t s) {
    Profiler* p = t_profiler;
    return p != nullptr && p->stream() == s ? p : nullptr;
}

Profiler::~Profiler() {
    if (t_profiler == this) t_profiler = nullptr;
    for (const Mark& m : marks_) {
        (void)gpuEventDestroy(m.a);
        (void)gpuEventDestroy(m.b);
    }
    for (gpuEvent_t e : free_) (void)gpuEventDestroy(e);
}

gpuEvent_t Profiler::event() {
    if (!free_.empty()) {
        gpuEvent_t e = free_.back();
        free_.pop_back();
        return e;
    }
    gpuEvent_t e{};
    check(gpuEventCreate(&e), "event create");
    return e;
}

void Profiler::begin(const void* kernel, dim3 grid) {
    // A stream that never syncs (a long prompt) still bounds the events held.
    if (marks_.size() >= 8192) {
        check(gpuStreamSynchronize(stream_), "stream synchronize");
        collect();
    }
    Mark m{{kernel, grid.x, grid.y, grid.z}, event(), event()};
    check(gpuEventRecord(m.a, stream_), "event record");
    marks_.push_back(m);
}

void Profiler::end() { check(gpuEventRecord(marks_.back().b, stream_), "event record"); }

void Profiler::collect() {
    for (const Mark& m : marks_) {
        float ms = 0.0f;
        check(gpuEventSynchronize(m.b), "event synchronize");
        check(gpuEventElapsedTime(&ms, m.a, m.b), "event elapsed time");
        Sum& s = sums_[m.key];
        ++s.calls;
        s.ms += ms;
        free_.push_back(m.a);
        free_.push_back(m.b);
    }
    marks_.clear();
}

std::string Profiler::report(int top) const {
    std::vector<std::pair<std::string, Sum>> rows;
    double total = 0.0;
    int64_t calls = 0;
    for (const auto& [k, s] : sums_) {
        rows.emplace_back(fmt::format("{} [{}x{}x{}]", kernel_name(k.kernel), k.x, k.y, k.z), s);
        total += s.ms;
        calls += s.calls;
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    std::string out = fmt::format("  {} kernels, {:.3f} ms in them\n  {:>10} {:>8} {:>6} {:>9}  {}\n", calls, total,
                                  "ms", "calls", "share", "us/call", "kernel");
    for (size_t i = 0; i < rows.size() && static_cast<int>(i) < top; ++i) {
        const auto& [name, s] = rows[i];
        out += fmt::format("  {:>10.3f} {:>8} {:>5.1f}% {:>9.2f}  {}\n", s.ms, s.calls, total > 0 ? 100.0 * s.ms / total : 0.0,
                           1000.0 * s.ms / static_cast<double>(s.calls), name);
    }
    return out;
}

// --- gpu.h ---

Profile* profile_create(Stream s) {
    return reinterpret_cast<Profile*>(new Profiler(static_cast<gpuStream_t>(s)));
}

void profile_destroy(Profile* p) { delete reinterpret_cast<Profiler*>(p); }

void profile_attach(Profile* p) { t_profiler = reinterpret_cast<Profiler*>(p); }

void profile_collect(Profile* p) {
    if (p) reinterpret_cast<Profiler*>(p)->collect();
}

std::string profile_report(const Profile* p, int top) {
    return p ? reinterpret_cast<const Profiler*>(p)->report(top) : std::string();
}

}  // namespace strata::gpu

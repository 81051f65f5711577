// The operators, with Python's rules: int and float arithmetic (bools count as ints,
// division always gives a float, // and % round toward minus infinity), + on strings
// and lists, * repeating them, and `in` on strings, lists and dicts.
#include <cmath>

#include "engine/core/error.h"
#include "engine/text/jinja/builtins.h"

namespace strata::jinja {
namespace {

const char* op_name(Op op) {
    switch (op) {
    case Op::Add: return "+";
    case Op::Sub: return "-";
    case Op::Mul: return "*";
    case Op::Div: return "/";
    case Op::FloorDiv: return "//";
    case Op::Mod: return "%";
    case Op::Pow: return "**";
    default: return "?";
    }
}

[[noreturn]] void unsupported(Op op, const Value& a, const Value& b) {
    if (a.is_undefined() || b.is_undefined()) fail("jinja: undefined value in '{}'", op_name(op));
    fail("jinja: unsupported operand types for {}: '{}' and '{}'", op_name(op), a.type_name(), b.type_name());
}

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }

int64_t checked_add(int64_t x, int64_t y) {
    int64_t r;
    if (__builtin_add_overflow(x, y, &r)) fail("jinja: integer overflow");
    return r;
}
int64_t checked_sub(int64_t x, int64_t y) {
    int64_t r;
    if (__builtin_sub_overflow(x, y, &r)) fail("jinja: integer overflow");
    return r;
}
int64_t checked_mul(int64_t x, int64_t y) {
    int64_t r;
    if (__builtin_mul_overflow(x, y, &r)) fail("jinja: integer overflow");
    return r;
}

Value int_pow(int64_t base, int64_t exp) {
    if (exp < 0) return Value::real(std::pow(static_cast<double>(base), static_cast<double>(exp)));
    int64_t r = 1;
    while (exp > 0) {  // by squaring: a huge exponent overflows in a few steps, or stays 0/1
        if (exp & 1) r = checked_mul(r, base);
        exp >>= 1;
        if (exp) base = checked_mul(base, base);
    }
    return Value::integer(r);
}

Value int_arith(Op op, int64_t x, int64_t y) {
    switch (op) {
    case Op::Add: return Value::integer(checked_add(x, y));
    case Op::Sub: return Value::integer(checked_sub(x, y));
    case Op::Mul: return Value::integer(checked_mul(x, y));
    case Op::Div:
        if (y == 0) fail("jinja: division by zero");
        return Value::real(static_cast<double>(x) / static_cast<double>(y));
    case Op::FloorDiv:
    case Op::Mod: {
        if (y == 0) fail("jinja: integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail("jinja: integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
        return Value::integer(op == Op::Mod ? m : q);
    }
    case Op::Pow: return int_pow(x, y);
    default: fail("jinja: bad arithmetic operator");
    }
}

Value float_arith(Op op, double x, double y) {
    switch (op) {
    case Op::Add: return Value::real(x + y);
    case Op::Sub: return Value::real(x - y);
    case Op::Mul: return Value::real(x * y);
    case Op::Div:
        if (y == 0) fail("jinja: float division by zero");
        return Value::real(x / y);
    case Op::FloorDiv:
        if (y == 0) fail("jinja: float floor division by zero");
        return Value::real(std::floor(x / y));
    case Op::Mod: {
        if (y == 0) fail("jinja: float modulo by zero");
        double m = std::fmod(x, y);
        return Value::real(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
    }
    case Op::Pow: return Value::real(std::pow(x, y));
    default: fail("jinja: bad arithmetic operator");
    }
}

Value repeat(const Value& seq, int64_t n) {
    size_t count = n > 0 ? static_cast<size_t>(n) : 0;
    if (seq.is_str()) {
        if (count && seq.str().text.size() > kMaxTextBytes / count) fail("jinja: string repetition too large");
        LStr out;
        for (size_t i = 0; i < count; ++i) out.append(seq.str());
        return Value::string(std::move(out));
    }
    if (count && seq.list().size() > kMaxTextBytes / sizeof(Value) / count) fail("jinja: list repetition too large");
    List out;
    for (size_t i = 0; i < count; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
    return Value::list(std::move(out));
}

Value add(const Value& a, const Value& b) {
    if (a.is_str() && b.is_str()) {
        check_text_size(a.str().text.size() + b.str().text.size());
        LStr s = a.str();
        s.append(b.str());
        return Value::string(std::move(s));
    }
    if (a.is_list() && b.is_list()) {
        check_text_size((a.list().size() + b.list().size()) * sizeof(Value));
        List l = a.list();
        l.insert(l.end(), b.list().begin(), b.list().end());
        return Value::list(std::move(l));
    }
    unsupported(Op::Add, a, b);
}

bool contains(const Value& container, const Value& item) {
    if (container.is_str()) {
        if (!item.is_str()) fail("jinja: 'in <string>' requires a string, not '{}'", item.type_name());
        return container.str().text.find(item.str().text) != std::string::npos;
    }
    if (container.is_list()) {
        for (const auto& v : container.list()) {
            if (equal(v, item)) return true;
        }
        return false;
    }
    if (container.is_dict()) return container.dict().find(item) != nullptr;
    if (container.is_undefined()) return false;  // jinja2's Undefined iterates as empty
    fail("jinja: argument of type '{}' is not iterable", container.type_name());
}

}  // namespace

Value binary_op(Op op, const Value& a, const Value& b) {
    switch (op) {
    case Op::Concat: {
        LStr s = a.to_str();
        s.append(b.to_str());
        check_text_size(s.text.size());
        return Value::string(std::move(s));
    }
    case Op::Eq: return Value::boolean(equal(a, b));
    case Op::Ne: return Value::boolean(!equal(a, b));
    case Op::Lt: return Value::boolean(compare(a, b) < 0);
    case Op::Le: return Value::boolean(compare(a, b) <= 0);
    case Op::Gt: return Value::boolean(compare(a, b) > 0);
    case Op::Ge: return Value::boolean(compare(a, b) >= 0);
    case Op::In: return Value::boolean(contains(b, a));
    case Op::NotIn: return Value::boolean(!contains(b, a));
    default: break;
    }
    if (a.is_number() && b.is_number()) {
        if (is_integral(a) && is_integral(b)) return int_arith(op, a.as_int(), b.as_int());
        return float_arith(op, a.as_float(), b.as_float());
    }
    if (op == Op::Add) return add(a, b);
    if (op == Op::Mul && (a.is_str() || a.is_list()) && is_integral(b)) return repeat(a, b.as_int());
    if (op == Op::Mul && (b.is_str() || b.is_list()) && is_integral(a)) return repeat(b, a.as_int());
    if (op == Op::Mod && a.is_str()) fail("jinja: '%' string formatting is not supported");
    unsupported(op, a, b);
}

Value unary_op(Op op, const Value& a) {
    if (op == Op::Not) return Value::boolean(!a.truthy());
    if (is_integral(a)) {
        if (op == Op::Pos) return Value::integer(a.as_int());
        if (a.as_int() == INT64_MIN) fail("jinja: integer overflow");
        return Value::integer(-a.as_int());
    }
    if (a.is_float()) return Value::real(op == Op::Neg ? -a.as_float() : a.as_float());
    if (a.is_undefined()) fail("jinja: undefined value in unary '{}'", op == Op::Neg ? "-" : "+");
    fail("jinja: bad operand type for unary {}: '{}'", op == Op::Neg ? "-" : "+", a.type_name());
}

}  // namespace strata::jinja

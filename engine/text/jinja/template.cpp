#include "engine/text/jinja/template.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/text/jinja/builtins.h"
#include "engine/text/jinja/lexer.h"
#include "engine/text/jinja/parser.h"

namespace strata::jinja {

Template Template::parse(std::string_view source) {
    Template t;
    t.source_ = normalize_source(source);
    t.body_ = std::make_shared<const Body>(parse_template(t.source_));
    return t;
}

Template::Output Template::render(const nlohmann::ordered_json& data, const RenderOptions& opt) const {
    return render(Value::from_json(data), opt);
}

Template::Output Template::render(const nlohmann::json& data, const RenderOptions& opt) const {
    return render(Value::from_json(data), opt);
}

Template::Output Template::render(Value data, const RenderOptions& opt) const {
    if (!data.is_dict() && !data.is_none()) fail("jinja: the render context must be a JSON object");
    auto globals = std::make_shared<Scope>();
    std::vector<std::pair<std::string, Value>> builtins;
    add_globals(builtins, opt.now);
    for (auto& [name, v] : builtins) globals->vars[name] = std::move(v);
    if (data.is_dict()) {
        for (const auto& [name, v] : data.dict().items) globals->vars[name.str().text] = v;
    }
    for (const auto& [name, text] : opt.trusted) globals->vars[name] = Value::text(text);
    LStr out = Interpreter(source_, opt.limits).render(*body_, globals);
    return {std::move(out.text), std::move(out.literal)};
}

}  // namespace strata::jinja

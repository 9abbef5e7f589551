// Error reporting of the Jinja subset (line/column and what was found), plus a few behaviours
// whose expected values are Python/Jinja2 facts written out by hand (checked with python3-jinja2).
#include <doctest/doctest.h>

#include "core/error.h"
#include "text/jinja.h"

namespace journey {
namespace {

std::string render(const std::string& source, jinja::Value context = jinja::Value::dict()) {
  jinja::Value full = jinja::default_globals(0);
  for (const auto& [k, v] : context.as_dict()) full.set(k, v);
  return jinja::Template::parse(source, "test.jinja").render(full);
}

std::string error_of(const std::string& source) {
  try {
    render(source);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("syntax errors name the origin, line and column and what was found") {
  SUBCASE("unclosed block tag") {
    std::string e = error_of("line one\n  {% if true ");
    CHECK_MESSAGE(e.find("test.jinja:2:3:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("unclosed tag") != std::string::npos, e);
  }
  SUBCASE("unclosed expression") {
    std::string e = error_of("abc {{ name ");
    CHECK_MESSAGE(e.find("test.jinja:1:5:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("unclosed expression") != std::string::npos, e);
  }
  SUBCASE("unclosed comment") {
    std::string e = error_of("{# never closed");
    CHECK_MESSAGE(e.find("test.jinja:1:1:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("unclosed comment") != std::string::npos, e);
  }
  SUBCASE("if without endif") {
    std::string e = error_of("{% for m in messages %}\n{% if m %}x{% endfor %}");
    CHECK_MESSAGE(e.find("test.jinja:2:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("'{% elif %}' or '{% else %}' or '{% endif %}'") == std::string::npos, e);
    CHECK_MESSAGE(e.find("endfor") != std::string::npos, e);
  }
  SUBCASE("missing endfor at end of input") {
    std::string e = error_of("{% for m in messages %}x");
    CHECK_MESSAGE(e.find("unexpected end of template") != std::string::npos, e);
    CHECK_MESSAGE(e.find("opened at line 1, column 4") != std::string::npos, e);
  }
  SUBCASE("bad expression") {
    std::string e = error_of("{{ 1 + }}");
    CHECK_MESSAGE(e.find("test.jinja:1:8:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("expected an expression, found '}}'") != std::string::npos, e);
  }
  SUBCASE("unexpected character") {
    std::string e = error_of("ok\n{{ a ; b }}");
    CHECK_MESSAGE(e.find("test.jinja:2:6:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("unexpected character ';'") != std::string::npos, e);
  }
  SUBCASE("unsupported statement") {
    std::string e = error_of("{% include 'x.jinja' %}");
    CHECK_MESSAGE(e.find("test.jinja:1:4:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("unsupported statement '{% include %}'") != std::string::npos, e);
  }
}

TEST_CASE("runtime errors carry line and column") {
  SUBCASE("unknown filter") {
    std::string e = error_of("a\n  {{ 'x' | frobnicate }}");
    CHECK_MESSAGE(e.find("test.jinja:2:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("unknown filter 'frobnicate'") != std::string::npos, e);
  }
  SUBCASE("undefined in arithmetic") {
    std::string e = error_of("{{ missing + 'a' }}");
    CHECK_MESSAGE(e.find("test.jinja:1:12:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("'missing' is undefined") != std::string::npos, e);
  }
  SUBCASE("raise_exception") {
    std::string e = error_of("\n\n{{ raise_exception('Only user and assistant roles are supported!') }}");
    CHECK_MESSAGE(e.find("test.jinja:3:") != std::string::npos, e);
    CHECK_MESSAGE(e.find("Only user and assistant roles are supported!") != std::string::npos, e);
  }
  SUBCASE("runaway macro recursion and deep nesting are errors, not crashes") {
    std::string e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    CHECK_MESSAGE(e.find("nested deeper than 100 calls") != std::string::npos, e);
    e = error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
    CHECK_MESSAGE(e.find("nested deeper than 200 levels") != std::string::npos, e);
  }
  SUBCASE("attribute assignment on a non-namespace") {
    std::string e = error_of("{% set x = 1 %}{% set x.y = 2 %}");
    CHECK_MESSAGE(e.find("only namespace() objects") != std::string::npos, e);
  }
}

// Expected values below were produced by python3-jinja2 3.1 with trim_blocks and lstrip_blocks.
TEST_CASE("whitespace control follows Jinja2 with trim_blocks and lstrip_blocks") {
  CHECK(render("  {% if true %}\n    x\n  {% endif %}\ny") == "    x\ny");
  CHECK(render("a  {%- if true -%}  b  {%- endif %}") == "ab");
  CHECK(render("  {{ 'v' }}\n") == "  v");  // lstrip does not apply to {{ }}; one final newline dropped
  CHECK(render("{# c #}\nx  {#- c #} y") == "x y");
  CHECK(render("{% if true +%}\nx{% endif %}") == "\nx");
}

TEST_CASE("expressions, filters and methods behave like Python/Jinja2") {
  CHECK(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 1 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }}") == "3 -4 2 0.5 2.0 1024");
  CHECK(render("{{ [1, 2] }} {{ {'a': none, 'b': true} }} {{ 'x' ~ 1 ~ none }}") == "[1, 2] {'a': None, 'b': True} x1None");
  CHECK(render("{{ 'héllo'[::-1] }} {{ 'héllo'|length }} {{ [1,2,3][1:] }} {{ [1,2,3][-1] }}") == "olléh 5 [2, 3] 3");
  CHECK(render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}") ==
        "a b|a|['a', 'b', '', 'c']|['a', 'b']");
  CHECK(render("{{ \"they're here\".title() }}|{{ \"they're here\"|title }}") == "They'Re Here|They're Here");
  CHECK(render("{{ {'b': 1, 'a': [1, 'é']}|tojson }}|{{ {'a': 1}|tojson(indent=2) }}") ==
        "{\"b\": 1, \"a\": [1, \"é\"]}|{\n  \"a\": 1\n}");
  CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }}{{ ',' if not loop.last }}{% endfor %}") ==
        "a=1,b=2");
  CHECK(render("{% for x in [1, 2, 3, 4] if x is even %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% else %}none{% endfor %}") ==
        "1/2:2 2/2:4 ");
  CHECK(render("{% for x in [] %}x{% else %}empty{% endfor %}") == "empty");
  CHECK(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}") == "13");
  CHECK(render("{% set ns = namespace(n=0) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% set leak = 1 %}{% endfor %}"
               "{{ ns.n }} {{ leak is defined }}") == "3 False");
  CHECK(render("{% set greeting %}Hi {{ 'there' }}{% endset %}{{ greeting | upper }}") == "HI THERE");
  CHECK(render("{% macro tag(name, close=false) %}<{{ '/' if close }}{{ name }}>{% endmacro %}{{ tag('a') }}{{ tag('a', close=true) }}") ==
        "<a></a>");
  CHECK(render("{{ [{'r': 'u'}, {'r': 'a'}, {'r': 'u'}] | selectattr('r', 'equalto', 'u') | list | length }}") == "2");
  CHECK(render("{{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ x is defined }} {{ 1 is not none }}") ==
        "True True True False True");
  CHECK(render("{{ 'b' in 'abc' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}") == "True True True");
  CHECK(render("{{ x | default('d') }} {{ '' | default('d', true) }} {{ 'yes' if 0 else 'no' }}") == "d d no");
  CHECK(render("{{ strftime_now('%d %b %Y') }}") == "01 Jan 1970");
}

}  // namespace
}  // namespace journey

#include <fstream>
#include <sstream>

namespace journey {
namespace {

// Bad input must give journey::Error, never a crash or another exception type: parse and render
// every prefix of real templates (unclosed tags, cut strings, half expressions) and some oddities.
TEST_CASE("every prefix of real templates fails cleanly or renders") {
  const char* files[] = {"hf-qwen3.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                         "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "google-gemma-2-2b-it.jinja"};
  jinja::Value context = jinja::default_globals(0);
  context.set("messages", jinja::Value(jinja::ValueList{jinja::Value::dict({{"role", "user"}, {"content", "Hi"}})}));
  int rendered = 0, rejected = 0;
  for (const char* file : files) {
    std::ifstream in(std::string(JOURNEY_SOURCE_DIR) + "/tests/data/chat-templates/templates/" + file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string source = text.str();
    REQUIRE(!source.empty());
    for (std::size_t n = 0; n <= source.size(); ++n) {
      try {
        jinja::Template::parse(source.substr(0, n), file).render(context);
        ++rendered;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  CHECK(rendered > 0);
  CHECK(rejected > 0);
  for (const char* odd : {"{{ 99999999999999999999999 }}", "{{ '\\uZZZZ' }}", "{{ 'abc", "{{ [1, 2 }}", "{{ ) }}",
                          "{% for %}", "{% set %}", "{{ x[::0] }}", "{{ 1 // 0 }}", "{{ 'a' * 99999999999 }}",
                          "{{ range(99999999999) }}", "{% endfor %}", "{{ {'a': 1}['a']['b'] }}"}) {
    try {
      jinja::Template::parse(odd, "odd.jinja").render(jinja::default_globals(0));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace journey

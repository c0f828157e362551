// JSON Schema (the subset structured-output APIs use) and free JSON as GBNF text
// (grammar.h compiles it).
//
// Supported: type (one or a list), properties, required, additionalProperties (false,
// true or a schema; absent means false beside properties, as OpenAI's strict mode and
// XGrammar have it, unless JsonSchemaLimits::strict is off),
// enum, const, anyOf, oneOf (as anyOf), a one-element allOf, items, prefixItems,
// minItems, maxItems, minLength, maxLength, pattern, format (date with each month's
// days, February's 29th in every year; time, date-time, uuid, email, ipv4, uri), minimum / maximum / exclusiveMinimum / exclusiveMaximum on
// integers (exact digit ranges) and a minimum of 0 on numbers, $ref to #, #/$defs/... and
// #/definitions/..., nullable. Annotations (title, description, examples, default, ...)
// are ignored. Any other keyword is a GrammarError naming it and where it is.
//
// The JSON it allows: no whitespace before the value, at most two whitespace characters
// in a row between tokens, integers of at most 16 digits, fractions of at most 16 and
// exponents of at most 2 (every number fits a double): a model cannot fill max_tokens with filler the grammar allows.
// Object properties come in the schema's order, optional ones may be left out.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace ridge::grammar {

struct JsonSchemaLimits {
  int32_t max_depth = 64;       // nesting of schemas
  int64_t max_rules = 20000;    // rules generated
  // Strict (OpenAI's strict mode, XGrammar's default): an object schema with properties
  // and no additionalProperties allows no others. Not strict: JSON Schema's own default,
  // any others (after the listed ones).
  bool strict = true;
};

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaLimits& limits = {});

// Any JSON value (response_format json_object: an object).
std::string json_value_gbnf(bool object_only);

}  // namespace ridge::grammar

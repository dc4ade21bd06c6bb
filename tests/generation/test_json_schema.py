"""JSON Schema to GBNF (pyengine.generation.json_schema): integer ranges and patterns exactly, texts the
grammar accepts valid by the ``jsonschema`` package (the oracle), and replies of the real models under
ten schemas that all parse and validate."""

from __future__ import annotations

import json

import pytest

from pyengine.generation import ChatSession, load
from pyengine.generation.grammar import Grammar
from pyengine.generation.grammar_parse import GrammarError
from pyengine.generation.json_schema import integer_range, json_mode_gbnf, parse_schema, schema_to_gbnf
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams

jsonschema = pytest.importorskip("jsonschema")

GREEDY = SamplerParams(temperature=0, top_k=1)


def accepts(grammar: Grammar, text: str) -> bool:
    sid = grammar.walk(grammar.start, text.encode("utf-8"))
    return sid != 0 and grammar.complete(sid)


@pytest.mark.parametrize("lo, hi", [(-5, 120), (18, None), (None, 7), (0, 0), (-1000, -999), (37, 1234),
                                    (None, -20), (100, 100), (9, 10)])
def test_integer_ranges_hold_exactly(lo, hi):
    g = Grammar.from_gbnf(f"root ::= {integer_range(lo, hi)}")
    for n in range(-1500, 1500):
        assert accepts(g, str(n)) == ((lo is None or n >= lo) and (hi is None or n <= hi)), n
    for text in ("-0", "01", "007", "+3", "", "1.0"):
        assert not accepts(g, text), text
    if hi is None:
        assert accepts(g, "9" * 16) and not accepts(g, "9" * 17)


def test_patterns_formats_and_lengths():
    cases = [
        ({"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"}, ['"AB-123"', '"ZZ-0000"'], ['"Ab-123"', '"AB-12"']),
        ({"type": "string", "pattern": "^(cat|dog)s?$"}, ['"cat"', '"dogs"'], ['"cow"', '"cats!"']),
        ({"type": "string", "pattern": "a\\.b"}, ['"a.b"', '"xxa.byy"'], ['"aXb"']),
        ({"type": "string", "pattern": "^[^0-9]+$"}, ['"abc"', '"é"'], ['"a1"', '"a\\"']),
        ({"type": "string", "format": "date"}, ['"2024-02-29"'], ['"2024-13-01"', '"24-01-01"']),
        ({"type": "string", "format": "time"}, ['"23:59:59Z"', '"01:02:03.456+05:30"'], ['"24:00:00Z"']),
        ({"type": "string", "format": "uuid"}, ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567"']),
        ({"type": "string", "minLength": 2, "maxLength": 3}, ['"ab"', '"a\\nc"'], ['"a"', '"abcd"']),
    ]
    for schema, good, bad in cases:
        g = Grammar.from_gbnf(schema_to_gbnf(schema))
        for text in good:
            assert accepts(g, text), (schema, text)
            jsonschema.validate(json.loads(text), schema)
        for text in bad:
            assert not accepts(g, text), (schema, text)


# ten schemas: nested objects, enums, arrays with bounds, numbers with ranges, refs, unions
SCHEMAS = [
    ("Describe a person as JSON.",
     {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                       "age": {"type": "integer", "minimum": 0, "maximum": 120}},
      "required": ["name", "age"]}),
    ("What is the weather like? Answer in JSON.",
     {"type": "object", "properties": {"sky": {"enum": ["sunny", "cloudy", "rainy"]},
                                       "celsius": {"type": "integer", "minimum": -40, "maximum": 50}},
      "required": ["sky", "celsius"]}),
    ("List three fruits as JSON.",
     {"type": "object", "properties": {"fruits": {"type": "array", "minItems": 1, "maxItems": 3,
                                                  "items": {"type": "string", "maxLength": 12}}},
      "required": ["fruits"]}),
    ("Give a book with its author as JSON.",
     {"type": "object", "properties": {
         "title": {"type": "string", "maxLength": 30},
         "author": {"type": "object", "properties": {"first": {"type": "string", "maxLength": 15},
                                                     "last": {"type": "string", "maxLength": 15}},
                    "required": ["first", "last"]},
         "year": {"type": "integer", "minimum": 1000, "maximum": 2030}},
      "required": ["title", "author", "year"]}),
    ("Rate this movie from 1 to 5 in JSON.",
     {"type": "object", "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5},
                                       "recommend": {"type": "boolean"}},
      "required": ["stars", "recommend"]}),
    ("Is the number 7 prime? Answer in JSON.",
     {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "confidence": {"type": "number"}},
      "required": ["answer"], "additionalProperties": False}),
    ("Give a point in 2D as JSON.",
     {"type": "object", "properties": {"point": {"type": "array", "prefixItems": [{"type": "integer"},
                                                                                   {"type": "integer"}]}},
      "required": ["point"]}),
    ("Give an event with a date as JSON.",
     {"type": "object", "properties": {"event": {"type": "string", "maxLength": 20},
                                       "date": {"type": "string", "format": "date"}},
      "required": ["event", "date"]}),
    ("Give a shape as JSON.",
     {"$defs": {"circle": {"type": "object", "properties": {"kind": {"const": "circle"},
                                                            "radius": {"type": "integer", "minimum": 1,
                                                                       "maximum": 100}},
                           "required": ["kind", "radius"]},
                "square": {"type": "object", "properties": {"kind": {"const": "square"},
                                                            "side": {"type": "integer", "minimum": 1,
                                                                     "maximum": 100}},
                           "required": ["kind", "side"]}},
      "oneOf": [{"$ref": "#/$defs/circle"}, {"$ref": "#/$defs/square"}]}),
    ("Give an order of a shop as JSON.",
     {"type": "object", "properties": {
         "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
         "items": {"type": "array", "maxItems": 2, "items": {
             "type": "object", "properties": {"sku": {"enum": ["pen", "ink", "pad"]},
                                              "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
             "required": ["sku", "qty"]}},
         "paid": {"type": ["boolean", "null"]}},
      "required": ["id", "items", "paid"]}),
]


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_each_schema_makes_a_grammar_that_accepts_only_what_validates(i):
    _, schema = SCHEMAS[i]
    jsonschema.Draft202012Validator.check_schema(schema)
    Grammar.from_gbnf(schema_to_gbnf(schema))


def test_accepted_texts_validate_and_refused_ones_do_not_all():
    schema = SCHEMAS[9][1]
    g = Grammar.from_gbnf(schema_to_gbnf(schema))
    good = ['{"id": "ABC-1234", "items": [], "paid": null}',
            '{\n  "id": "XYZ-0000",\n  "items": [{"sku": "pen", "qty": 2}, {"sku": "ink", "qty": 9}],\n'
            '  "paid": true\n}']
    bad = ['{"id": "AB-1234", "items": [], "paid": null}', '{"id": "ABC-1234", "items": [], "paid": 1}',
           '{"id": "ABC-1234", "items": [{"sku": "pen", "qty": 10}], "paid": false}',
           '{"id": "ABC-1234", "items": [{}, {}, {}], "paid": false}', '{"items": [], "paid": false}']
    for text in good:
        assert accepts(g, text), text
        jsonschema.validate(json.loads(text), schema)
    for text in bad:
        assert not accepts(g, text), text
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(text), schema)


def test_optional_properties_keep_their_order_and_extra_keys_are_not_the_declared_ones():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "additionalProperties": {"type": "boolean"}}
    g = Grammar.from_gbnf(schema_to_gbnf(schema))
    for text, ok in [('{}', True), ('{"a": 1}', True), ('{"b": 2}', True), ('{"a": 1, "b": 2}', True),
                     ('{"b": 2, "a": 1}', False), ('{"a": 1, "x": true}', True), ('{"x": true, "y": false}', True),
                     ('{"a": 1, "a": 2}', False), ('{"a": 1, "b": true}', False), ('{"ab": true}', True)]:
        assert accepts(g, text) == ok, text


def test_json_mode_is_any_object():
    g = Grammar.from_gbnf(json_mode_gbnf())
    for text, ok in [('{}', True), ('{"a": [1, 2.5e3, "x", null, {"b": false}]}', True), ('[1]', False),
                     ('"x"', False), ('{"a": 01}', False)]:
        assert accepts(g, text) == ok, text


@pytest.mark.parametrize("schema, where", [
    ({"type": "strnig"}, "schema at #/type: unknown type 'strnig'"),
    ({"$ref": "#/$defs/nope"}, "schema at #/$ref: #/$defs/nope points to nothing"),
    ({"$ref": "https://example.com/s.json"}, "schema at #/$ref: only references within the schema"),
    ({"type": "array", "minItems": -1}, "schema at #/minItems: expecting a whole number >= 0"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, "schema at #: no integer is >= 5 and <= 4"),
    ({"properties": {"x": {"type": "string", "pattern": "^(?=a)$"}}},
     "schema at #/properties/x/pattern: pattern '^(?=a)$' at 2: lookarounds and named groups are not supported"),
    ({"type": "array", "minItems": 100000}, "schema at #/minItems: 100000 is more than a grammar repeats (2000)"),
])
def test_bad_schemas_are_clear_errors(schema, where):
    with pytest.raises(GrammarError, match=None) as e:
        Grammar.from_gbnf(schema_to_gbnf(schema))
    assert where in str(e.value)


def test_schema_text_errors_name_line_and_column():
    with pytest.raises(GrammarError, match="^schema: line 2, column 5: Expecting value"):
        parse_schema('{"a":\n    ]}')


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def engine(request):
    from conftest import GEMMA3, SMOLLM2
    path = {"smollm2": SMOLLM2, "gemma3": GEMMA3}[request.param]
    if not path.is_file():
        pytest.skip(f"{path} not fetched")
    return load(path)


@pytest.mark.real_model
def test_replies_of_the_real_models_parse_and_validate(engine):
    failures = []
    for prompt, schema in SCHEMAS:
        chat = ChatSession(engine, grammar=Grammar.from_gbnf(schema_to_gbnf(schema)))
        turn = chat.send(prompt, Request(GREEDY, 96))
        text = "".join(turn)
        if turn.stats.stop_reason != "eog":
            failures.append((prompt, turn.stats.stop_reason, text))
            continue
        jsonschema.validate(json.loads(text), schema)
    assert not failures, failures


@pytest.mark.real_model
def test_a_small_budget_still_closes_every_reply(engine):
    """A budget of 4 tokens more than the schema's shortest sentence has bytes (15 to 56), fewer than the
    replies above take: every reply is still a whole value that validates (the budget closes it)."""
    for prompt, schema in SCHEMAS:
        g = Grammar.from_gbnf(schema_to_gbnf(schema))
        budget = int(g.dist[g.start]) + 4
        turn = ChatSession(engine, grammar=g).send(prompt, Request(GREEDY, budget))
        text = "".join(turn)
        assert len(turn.ids) <= budget
        jsonschema.validate(json.loads(text), schema)

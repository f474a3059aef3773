"""Grammar-constrained decoding on a real built model (its own BPE tokenizer, random weights):
replies parse and validate, a resumed reply continues the same grammar token for token, a
grammar that cannot end in max_tokens ends with `length`, a bad grammar is refused with
llguidance's reason, the masks themselves are exact, and a reply ends `stop` only when its
text is complete under its grammar (a corpus of hostile schemas: refused, valid, `length` or
`grammar_failed`, never an invalid `stop`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from tokenizers import Tokenizer

from build_engines.build import build_model
from config.settings import ModelSpec
from engine.config import EngineConfig
from engine.grammar import GrammarCompiler, GrammarError, apply_masks
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, FinishReason, RequestOutput, SamplingParams

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def json_grammar(schema: dict[str, Any]) -> str:
    """What contracts/guided_grammar.py sends (held to it in tests/contracts)."""
    return "start: %json " + json.dumps({**schema, "x-guidance": {"whitespace_flexible": False}})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = ModelSpec.model_validate(
        {
            "weights_uri": "unused",
            "max_context_tokens": 512,
            "seed": 5,
            "architecture": {
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "vocab_size": 512,
            },
        }
    )
    return build_model("tiny", spec, tmp_path_factory.mktemp("grammar") / "tiny", log=lambda _: None)


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def new_engine(model_dir: Path) -> LLMEngine:
    return LLMEngine.from_pretrained(model_dir, EngineConfig(kv_capacity_tokens=4096, block_size=16))


def run(engine: LLMEngine, *requests: EngineRequest) -> dict[str, list[RequestOutput]]:
    for request in requests:
        engine.add_request(request)
    outputs: dict[str, list[RequestOutput]] = {}
    while engine.has_unfinished():
        for output in engine.step():
            outputs.setdefault(output.request_id, []).append(output)
    return outputs


def tokens(outputs: list[RequestOutput]) -> list[int]:
    return [t for output in outputs for t in output.new_token_ids]


def request(request_id: str, prompt: list[int], max_tokens: int, **sampling: Any) -> EngineRequest:
    return EngineRequest(request_id, tuple(prompt), SamplingParams(max_tokens=max_tokens, **sampling))


def validates(value: Any, schema: dict[str, Any]) -> bool:
    """The few keywords PERSON uses, checked by hand (no jsonschema dependency)."""
    if schema.get("type") == "object":
        props = schema["properties"]
        return (
            isinstance(value, dict)
            and set(value) == set(schema["required"])
            and all(validates(value[k], props[k]) for k in value)
        )
    if schema.get("type") == "string":
        return isinstance(value, str) and len(value) <= schema.get("maxLength", len(value))
    if schema.get("type") == "integer":
        return isinstance(value, int) and schema["minimum"] <= value <= schema["maximum"]
    if schema.get("type") == "array":
        return isinstance(value, list) and len(value) <= schema["maxItems"] and all(v in "abc" for v in value)
    return False


def test_every_constrained_reply_parses_and_validates(model_dir: Path, tokenizer: Tokenizer) -> None:
    """Eight prompts, greedy and sampled, batched with an unconstrained reply: each JSON reply
    ends with `stop` as soon as the object closes and validates against the schema."""
    engine = new_engine(model_dir)
    grammar = json_grammar(PERSON)
    requests = [
        request(
            f"r{i}",
            tokenizer.encode(f"person number {i}:").ids,
            120,
            grammar=grammar,
            temperature=0.9 * (i % 2),
            seed=i,
        )
        for i in range(8)
    ]
    free = request("free", tokenizer.encode("hello").ids, 20, ignore_eos=True)
    outputs = run(engine, *requests, free)
    for req in requests:
        got = outputs[req.request_id]
        assert got[-1].finish_reason is FinishReason.STOP, req.request_id
        assert validates(json.loads(tokenizer.decode(tokens(got))), PERSON)
    assert len(tokens(outputs["free"])) == 20 and outputs["free"][-1].finish_reason is FinishReason.LENGTH


def test_a_resumed_reply_continues_the_same_grammar_token_for_token(model_dir: Path, tokenizer: Tokenizer) -> None:
    """Failover: a fresh engine given the first k tokens as resumed ones masks after them
    exactly as the original did, so greedy and seeded replies go on identically."""
    grammar = json_grammar(PERSON)
    prompt = tokenizer.encode("a person:").ids
    for sampling in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 11}):
        whole = tokens(run(new_engine(model_dir), request("a", prompt, 120, grammar=grammar, **sampling))["a"])
        assert len(whole) > 6
        for k in (1, len(whole) // 2, len(whole) - 1):
            resumed = EngineRequest(
                "b",
                tuple(prompt),
                SamplingParams(max_tokens=120, grammar=grammar, **sampling),
                resume_token_ids=tuple(whole[:k]),
            )
            assert whole[:k] + tokens(run(new_engine(model_dir), resumed)["b"]) == whole, (sampling, k)


def test_a_grammar_that_cannot_end_in_max_tokens_ends_with_length(model_dir: Path, tokenizer: Tokenizer) -> None:
    long_string = json_grammar(
        {"type": "object", "properties": {"s": {"type": "string", "minLength": 50}}, "required": ["s"]}
    )
    [*_, last] = run(new_engine(model_dir), request("r", tokenizer.encode("x").ids, 8, grammar=long_string))["r"]
    assert last.finish_reason is FinishReason.LENGTH and last.completion_tokens == 8


def test_a_regex_grammar_is_followed_and_ends_the_reply(model_dir: Path, tokenizer: Tokenizer) -> None:
    outputs = run(
        new_engine(model_dir), request("r", tokenizer.encode("a date").ids, 40, grammar="start: /[0-9]{4}-[0-9]{2}/")
    )
    text = tokenizer.decode(tokens(outputs["r"]))
    assert len(text) == 7 and text[4] == "-" and (text[:4] + text[5:]).isdigit()
    assert outputs["r"][-1].finish_reason is FinishReason.STOP


@pytest.mark.parametrize(
    ("grammar", "reason"),
    [
        ('start: %json {"type": "strin"}', "Invalid type: strin"),
        ('start: %json {"type": "string", "format": "not-a-format"}', "Unknown format"),
        ("start: undefined_rule", 'unknown name: "undefined_rule"'),
        ("start: /a(/", "unclosed group"),
    ],
)
def test_a_bad_grammar_is_refused_with_llguidances_reason(model_dir: Path, grammar: str, reason: str) -> None:
    engine = new_engine(model_dir)
    with pytest.raises(ValueError, match="the grammar does not compile") as refused:
        engine.validate_request(request("r", [5, 6], 4, grammar=grammar))
    assert reason in str(refused.value)
    assert grammar not in str(refused.value) or len(grammar) < 20  # the reason, not the echoed text


def test_resumed_tokens_the_grammar_refuses_are_the_callers_error(model_dir: Path, tokenizer: Tokenizer) -> None:
    bad = EngineRequest(
        "r",
        (5, 6),
        SamplingParams(max_tokens=9, grammar=json_grammar(PERSON)),
        resume_token_ids=tuple(tokenizer.encode("hi").ids),
    )
    with pytest.raises(ValueError, match="resumed tokens do not follow the grammar"):
        new_engine(model_dir).validate_request(bad)


def test_compiles_are_cached_and_errors_too(model_dir: Path) -> None:
    compiler = GrammarCompiler.from_model_dir(model_dir, 512, 2)
    assert compiler is not None
    grammar = json_grammar(PERSON)
    assert compiler.compile(grammar) is compiler.compile(grammar)
    with pytest.raises(GrammarError) as first:
        compiler.compile("start: nope")
    with pytest.raises(GrammarError) as second:
        compiler.compile("start: nope")
    assert first.value is second.value


def test_the_compile_bound_refuses_a_slow_grammar(model_dir: Path) -> None:
    compiler = GrammarCompiler(GrammarCompiler.from_model_dir(model_dir, 512, 2)._tokenizer, max_compile_s=0.0)  # type: ignore[union-attr]
    with pytest.raises(GrammarError, match=r"past the bound of 0\.0 s"):
        compiler.compile(json_grammar(PERSON))


def test_masks_allow_exactly_what_the_grammar_allows(model_dir: Path, tokenizer: Tokenizer) -> None:
    """At the start only `{` may come; after `{"name":"` a string's characters and its closing
    quote may, a raw newline and the end of the sequence may not. The masked
    logits are -inf exactly at the forbidden ids, in the rows asked, and nowhere else."""
    compiler = GrammarCompiler.from_model_dir(model_dir, 512, 2)
    assert compiler is not None
    matcher = compiler.matcher_after(json_grammar(PERSON), tokenizer.encode('{"name":"', add_special_tokens=False).ids)
    fresh = compiler.compile(json_grammar(PERSON)).matcher()
    bitmask = compiler.fill_masks([matcher, fresh])
    logits = np.zeros((3, 512), np.float32)
    apply_masks(logits, [2, 0], bitmask)
    allowed_in_string, allowed_at_start = np.isfinite(logits[2]), np.isfinite(logits[0])
    assert np.isfinite(logits[1]).all()  # a row not asked for is untouched
    vocab = tokenizer.get_vocab()
    assert allowed_at_start.sum() >= 1 and allowed_at_start[vocab["{"]] and not allowed_at_start[vocab["}"]]
    assert allowed_in_string[vocab["a"]] and allowed_in_string[vocab['"']] and not allowed_in_string[2]  # no EOS
    assert not allowed_in_string[vocab["Ċ"]]  # a raw newline (byte-level "Ċ") cannot sit in a JSON string


# A pattern whose lexer outgrows llguidance's limits a few dozen characters in (the issue's).
HUGE_REPETITION = {"type": "string", "pattern": "^(a|aa|[a-z]{1,50}){500}$"}


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


CORPUS: dict[str, dict[str, Any]] = {
    "person": PERSON,
    "enum": {"enum": ["a", "b", 3, None]},
    "recursive lists": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2},
    "self-requiring": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    "nested 20": _nested(20),
    "nested 200": _nested(200),
    "huge repetition": {"type": "object", "properties": {"x": HUGE_REPETITION}, "required": ["x"]},
    "huge count": {"type": "string", "pattern": "^a{100000}$"},
    "minLength > maxLength": {"type": "string", "minLength": 5, "maxLength": 2},
    "minimum > maximum": {"type": "integer", "minimum": 5, "maximum": 2},
    "minItems > maxItems": {"type": "array", "minItems": 5, "maxItems": 2},
    "empty anyOf": {"anyOf": []},
    "not anything": {"not": {}},
    "only itself": {"$ref": "#"},
    "a loop of refs": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
}


def test_a_constrained_reply_ends_stop_only_when_its_text_is_valid(model_dir: Path, tokenizer: Tokenizer) -> None:
    """Every schema of the corpus, greedy and sampled: refused before any token (with the
    reason), or a reply that ends `stop` with a document the schema accepts, `length`, or
    `grammar_failed`. Before, `{"$ref": "#"}` ended `stop` with "" and the huge repetition
    count `stop` with a cut string: the matcher had given up, and its mask allowed only the
    end-of-sequence token, which the engine took for a normal end."""
    ends: dict[str, set[str]] = {}
    for name, schema in CORPUS.items():
        engine = new_engine(model_dir)
        prompt = tokenizer.encode(f"{name}:").ids
        grammar = json_grammar(schema)
        requests = [
            request(f"{name}/{seed}", prompt, 80, grammar=grammar, temperature=min(seed, 1), seed=seed)
            for seed in range(3)
        ]
        try:
            for req in requests:
                engine.validate_request(req)
        except ValueError as exc:
            assert "grammar" in str(exc), (name, exc)
            ends[name] = {"refused"}
            continue
        outputs = run(engine, *requests)
        for req in requests:
            got = outputs[req.request_id]
            reason = got[-1].finish_reason
            assert reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.GRAMMAR_FAILED), (name, reason)
            if reason is FinishReason.STOP:
                text = tokenizer.decode(tokens(got))
                jsonschema.validate(json.loads(text), schema)  # raises on an invalid stop
            ends.setdefault(name, set()).add(reason.value)
    refused = {name for name, seen in ends.items() if seen == {"refused"}}
    assert refused == {
        "nested 200", "minLength > maxLength", "minimum > maximum", "minItems > maxItems", "empty anyOf",
        "not anything", "only itself", "a loop of refs",
    }  # fmt: skip
    assert "grammar_failed" in ends["huge repetition"] and "stop" in ends["person"]


def test_a_grammar_that_gives_up_mid_reply_ends_it_failed_then_is_refused(
    model_dir: Path, tokenizer: Tokenizer
) -> None:
    """The huge repetition count: the reply ends `grammar_failed` after the tokens the grammar
    took (never `stop` or `length`), and the next request for it is refused before any token
    with llguidance's reason (the compiled grammar's lexer is past its limit for good)."""
    engine = new_engine(model_dir)
    grammar = json_grammar({"type": "object", "properties": {"x": HUGE_REPETITION}, "required": ["x"]})
    outputs = run(engine, request("r", tokenizer.encode("x:").ids, 100, grammar=grammar))["r"]
    assert outputs[-1].finish_reason is FinishReason.GRAMMAR_FAILED
    got = tokens(outputs)
    assert 6 < len(got) < 100 and outputs[-1].completion_tokens == len(got)
    assert tokenizer.decode(got).startswith('{"x":"') and engine.model.eos_token_id not in got
    with pytest.raises(ValueError, match="cannot be followed within llguidance's limits: lexer error"):
        engine.validate_request(request("again", [5, 6], 10, grammar=grammar))

"""Real-world-shaped JSON schemas for `bench guided`'s compile times: what structured-output and
tool-calling users send (flat records, nested arrays, enums, formats, patterns, $defs and
references, unions, free-form maps), a dozen of them, small to large."""

from __future__ import annotations

from typing import Any

_ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "postal_code": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
        "country": {"type": "string", "minLength": 2, "maxLength": 2},
    },
    "required": ["street", "city", "country"],
    "additionalProperties": False,
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "email": {"type": "string"},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "address": _ADDRESS,
    "sentiment": {
        "type": "object",
        "properties": {
            "label": {"enum": ["positive", "negative", "neutral", "mixed"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["label", "confidence"],
    },
    "invoice": {
        "type": "object",
        "properties": {
            "invoice_id": {"type": "string"},
            "issued": {"type": "string", "format": "date"},
            "bill_to": _ADDRESS,
            "lines": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                        "description": {"type": "string"},
                        "quantity": {"type": "integer", "minimum": 1},
                        "unit_price": {"type": "number"},
                    },
                    "required": ["sku", "quantity", "unit_price"],
                },
                "minItems": 1,
            },
            "currency": {"enum": ["USD", "EUR", "GBP", "JPY"]},
            "total": {"type": "number"},
        },
        "required": ["invoice_id", "issued", "lines", "total"],
    },
    "event": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 120},
            "starts": {"type": "string", "format": "date-time"},
            "ends": {"type": "string", "format": "date-time"},
            "attendees": {"type": "array", "items": {"type": "string", "format": "email"}, "maxItems": 50},
            "location": {"anyOf": [_ADDRESS, {"type": "string", "format": "uri"}]},
        },
        "required": ["title", "starts"],
    },
    "tool_call": {
        "type": "object",
        "properties": {
            "name": {"enum": ["get_weather", "search_web", "book_flight"]},
            "arguments": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                        "required": ["city"],
                    },
                    {
                        "type": "object",
                        "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}},
                        "required": ["query"],
                    },
                    {
                        "type": "object",
                        "properties": {
                            "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                            "to": {"type": "string", "pattern": "^[A-Z]{3}$"},
                            "date": {"type": "string", "format": "date"},
                        },
                        "required": ["from", "to", "date"],
                    },
                ]
            },
        },
        "required": ["name", "arguments"],
    },
    "github_issue": {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "body": {"type": "string"},
            "labels": {"type": "array", "items": {"enum": ["bug", "feature", "docs", "question", "perf", "security"]}},
            "assignees": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z0-9-]{1,39}$"}},
            "milestone": {"type": ["integer", "null"]},
            "priority": {"enum": ["p0", "p1", "p2", "p3"]},
        },
        "required": ["title", "labels"],
    },
    "recursive_tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["value"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "country_enum": {
        "type": "object",
        "properties": {"country": {"enum": [f"country-{i:03d}" for i in range(250)]}, "note": {"type": "string"}},
        "required": ["country"],
    },
    "settings_map": {
        "type": "object",
        "properties": {
            "flags": {"type": "object", "additionalProperties": {"type": "boolean"}},
            "limits": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        },
        "required": ["flags"],
    },
    "extraction": {
        "type": "object",
        "properties": {
            "entities": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string"},
                        "type": {"enum": ["PERSON", "ORG", "LOC", "DATE", "MONEY", "PRODUCT", "EVENT"]},
                        "start": {"type": "integer"},
                        "end": {"type": "integer"},
                    },
                    "required": ["text", "type"],
                },
            },
            "relations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "head": {"type": "integer"},
                        "tail": {"type": "integer"},
                        "kind": {"type": "string"},
                    },
                    "required": ["head", "tail", "kind"],
                },
            },
        },
        "required": ["entities"],
    },
    "wide_record": {
        "type": "object",
        "properties": {
            f"field_{i:02d}": (
                {"type": "string"} if i % 3 == 0 else {"type": "integer"} if i % 3 == 1 else {"type": "boolean"}
            )
            for i in range(60)
        },
        "required": [f"field_{i:02d}" for i in range(0, 60, 2)],
        "additionalProperties": False,
    },
}

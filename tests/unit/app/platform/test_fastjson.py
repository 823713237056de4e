"""app.platform.fastjson gives what the standard library gives, in the corners where
orjson alone would not (big integers, what orjson refuses), and the same
results on a generated corpus."""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

import pytest
from starlette.responses import JSONResponse

from app.platform import fastjson


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


@pytest.mark.parametrize("text", [
    '{"n": 123456789012345678901234567890}', '[-99999999999999999999]',
    '{"s": "\\ud800"}', '[NaN]', '[1e400]', '{"a": 1, "a": 2}', '"\\u0000"',
    '-0', '5e-324', '[0.1, 1E5, 2.2250738585072011e-308]', '"\ufeff"',
])
def test_reads_what_json_reads(text: str) -> None:
    for data in (text, text.encode("utf-8", "surrogatepass")):
        expected = json.loads(data)
        got = fastjson.loads(data)
        assert repr(got) == repr(expected)


def test_refuses_as_json_refuses() -> None:
    for raw in (b"[NaN]", b"[Infinity]", b"\xff", b'{"a" 1}', b"[" * 5000 + b"]" * 5000):
        with pytest.raises((ValueError, RecursionError)) as expected:
            json.loads(raw, parse_constant=_refuse_constant)
        with pytest.raises(type(expected.value)) as got:
            fastjson.loads(raw, parse_constant=_refuse_constant)
        assert str(got.value) == str(expected.value)


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 4 or pick < 0.3:
        kind = rng.randrange(6)
        if kind == 0:
            return rng.randint(-2**63, 2**63 - 1)
        if kind == 1:
            f = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
            return f if math.isfinite(f) else 0.5
        if kind == 2:
            return "".join(chr(rng.choice([rng.randrange(0, 0x80), rng.randrange(0x80, 0xd7ff),
                                           rng.randrange(0xe000, 0x110000)]))
                           for _ in range(rng.randrange(8)))
        if kind == 3:
            return rng.choice([True, False, None])
        if kind == 4:
            return rng.randint(-10**40, 10**40)
        return rng.random() * 10 ** rng.randint(-30, 30)
    if pick < 0.65:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randrange(5))}


def test_same_results_as_json_on_a_generated_corpus() -> None:
    rng = random.Random(13)
    for _ in range(3000):
        value = _value(rng)
        text = json.dumps(value, ensure_ascii=False)
        assert repr(fastjson.loads(text)) == repr(json.loads(text))
        assert repr(fastjson.loads(text.encode())) == repr(json.loads(text))
        # Encoded and read back, the value is the same (number forms may differ).
        assert repr(json.loads(fastjson.dumps(value))) == repr(value)


def test_writes_what_the_json_response_wrote() -> None:
    value = {"text": "é \n \"q\" \u2028 \x7f", "n": [0, -1, 2**63 - 1], "f": 1.5,
             "none": None, "big": 10**30, "nested": {"t": True}}
    assert fastjson.dumps(value) == JSONResponse(value).body
    assert fastjson.dumps({1: "non-string key"}) == JSONResponse({1: "non-string key"}).body
    assert fastjson.dumps_text(value) == JSONResponse(value).body.decode()

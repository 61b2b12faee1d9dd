"""Hypothesis strategies for hostile HTTP input, shared by the node's and the lend API's fuzz tests.

SEED comes from CADRE_TEST_SEED when set (to replay a failure), else at random; the
tests that use it print it. FUZZ is their settings (CADRE_FUZZ_EXAMPLES examples).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import zlib

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SEED = int(os.environ.get("CADRE_TEST_SEED") or random.SystemRandom().randrange(2**32))
FUZZ = settings(max_examples=int(os.environ.get("CADRE_FUZZ_EXAMPLES", "120")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                print_blob=True)
MAX_BODY = 4096  # the node's body limit: bodies are drawn on both sides of it


# -- strategies --------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=15,
)
texts = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(codec="ascii"), min_size=1, max_size=600),
    st.sampled_from(["", " ", "\x00", "\u202e", "\ufeff", "A" * 513, "é" * 300, "🙂" * 70, "../../etc/passwd",
                     "<script>alert(1)</script>", "' OR 1=1 --", "%00", "\r\nX-Injected: 1"]),
)
ENCODINGS = ["utf-8", "utf-16", "utf-16-le", "utf-32", "utf-8-sig", "latin-1", "cp1252"]


def near_misses(secret: str) -> st.SearchStrategy[str]:
    """Strings close to the right secret that must all be refused."""
    return st.one_of(
        st.just(secret.upper()), st.just(secret[:-1]), st.just(secret + "x"), st.just(" " + secret),
        st.just(secret + "\n"), st.just(secret.replace("k", "K", 1)), st.just(secret[::-1]),
        st.integers(0, len(secret) - 1).map(lambda i: secret[:i] + chr((ord(secret[i]) + 1) % 128) + secret[i + 1:]),
        st.just(secret.replace("-", "\u2010")),  # a look-alike hyphen
    )


def encode(doc, encoding: str) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode(encoding, errors="replace")


def bodies(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy[bytes]:
    shaped = st.fixed_dictionaries({}, optional={k: v | json_values for k, v in fields.items()})
    extra = st.dictionaries(st.text(max_size=12), json_values, max_size=3)
    docs = st.builds(lambda a, b: {**b, **a}, shaped, extra)
    return st.one_of(
        st.builds(encode, docs, st.sampled_from(ENCODINGS)),
        st.builds(encode, json_values, st.sampled_from(ENCODINGS)),
        st.binary(max_size=600),
        st.integers(1, 2500).map(lambda d: b"[" * d + b"]" * d),  # deep nesting
        st.integers(1, 1400).map(lambda d: b'{"a":' * d + b"1" + b"}" * d),
        st.integers(MAX_BODY - 10, MAX_BODY + 3000).map(lambda n: b'{"secret": "' + b"s" * n + b'"}'),
        st.just(gzip.compress(b'{"secret": "' + b"s" * 2_000_000 + b'"}')),  # a small bomb
        st.sampled_from([b"", b" ", b"null", b"[]", b'"text"', b"NaN", b"1e999999", b"-0", b"{}" * 3,
                         b'{"secret": "x", "secret": "y"}', b"9" * 4000, b'{"cadre": "\\ud800"}']),
    )


header_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=1,
                       max_size=20)
header_values = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
                        max_size=100)
CONTENT_TYPES = ["application/json", "application/json; charset=utf-16", "text/plain", "multipart/form-data",
                 "application/x-www-form-urlencoded", "application/json; charset=nonsense", "*/*", ""]


@st.composite
def requests(draw, fields: dict[str, st.SearchStrategy], token: str | None = None):
    body = draw(bodies(fields))
    headers = [("Content-Type", draw(st.sampled_from(CONTENT_TYPES) | header_values))]
    headers += draw(st.lists(st.tuples(header_names, header_values), max_size=4).filter(
        lambda hs: all(k.lower() not in ("content-length", "transfer-encoding", "host", "content-encoding",
                                         "expect", "connection", "upgrade") for k, _ in hs)))
    encoding = draw(st.sampled_from([None, None, None, "gzip", "deflate", "br", "x-unknown"]))
    if encoding is not None:
        if encoding == "gzip" and draw(st.booleans()):
            body = gzip.compress(body)
        elif encoding == "deflate" and draw(st.booleans()):
            body = zlib.compress(body)
        headers.append(("Content-Encoding", encoding))
    if token is not None:
        sendable = near_misses(token).filter(lambda t: t.isprintable() and t.isascii())
        auth = draw(st.one_of(st.just(f"Bearer {token}"), st.just(token), st.just(f"Basic {token}"),
                              sendable.map(lambda t: f"Bearer {t}"), header_values))
        headers.append(("Authorization", auth))
    return body, headers, draw(st.booleans())


def checked_answer(status: int, data: bytes, what: str = "") -> tuple[int, dict]:
    """A fuzzed request's answer, held to what every answer must be: never a 5xx, JSON
    (or the plain-text 400 an HTTP parser may give before any handler runs), and an error
    in the contract's shape {"error": {"code", "message"}}. Returns (status, the JSON)."""
    assert status < 500, f"{what}{status}: {data[:300]!r}"
    try:
        doc = json.loads(data)
    except ValueError:
        assert status == 400, f"{status} with a body that is not JSON: {data[:200]!r}"
        return status, {}
    if status >= 400:
        assert set(doc) == {"error"} and {"code", "message"} <= set(doc["error"]), doc
    return status, doc

"""The redactor (``prover_core.redaction``) against an oracle of its own (issue 55): every form a secret may take in a
message is written out here by hand, each checked against the standard library's encoder, never derived from the
redactor's ``forms``; secrets that nest, share a prefix or overlap in a message; the 8-character threshold of a
header value (``MIN_HEADER_SECRET``) on both sides, whitespace-padded values included. The end-to-end checks (a
server or a proxy echoing a secret into an error message) are in tests/test_security.py.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest

from prover_core.connections import LoopPools
from prover_core.errors import CredentialError
from prover_core.redaction import MIN_HEADER_SECRET, Redactor, header_secrets, refuse_url_credentials

KEY = "sk-Test_Key/with+odd=chars 1"
"""A key with a space, ``/``, ``+`` and ``=``: its percent-, slash-keeping and form-encoded forms all differ."""
ODD = "sk-Odd\\Key\"It's/+=~ 9"
"""A header value with a backslash and both quotes: its ``repr``- and JSON-escaped forms differ from it and from each
other (``repr`` escapes the ``'``, JSON the ``"``)."""


def _repr(secret: str) -> str:
    return repr(secret)[1:-1]


def _json(secret: str) -> str:
    return json.dumps(secret)[1:-1]


def _quote_all(secret: str) -> str:
    return quote(secret, safe="")


# (secret, form as written out by hand, the standard library's encoder that makes it)
WRITTEN_OUT: list[tuple[str, str, Callable[[str], str]]] = [
    (KEY, "sk-Test_Key/with+odd=chars 1", str),
    (KEY, "sk-Test_Key%2Fwith%2Bodd%3Dchars%201", _quote_all),
    (KEY, "sk-Test_Key/with%2Bodd%3Dchars%201", quote),  # "/" kept, quote's default
    (KEY, "sk-Test_Key%2Fwith%2Bodd%3Dchars+1", quote_plus),  # a form field: "+" for the space
    (ODD, "sk-Odd\\Key\"It's/+=~ 9", str),
    (ODD, "sk-Odd\\\\Key\"It\\'s/+=~ 9", _repr),
    (ODD, "sk-Odd\\\\Key\\\"It's/+=~ 9", _json),
    (ODD, "sk-Odd%5CKey%22It%27s%2F%2B%3D~%209", _quote_all),
    (ODD, "sk-Odd%5CKey%22It%27s/%2B%3D~%209", quote),
    (ODD, "sk-Odd%5CKey%22It%27s%2F%2B%3D~+9", quote_plus),
]


@pytest.mark.parametrize(
    ("secret", "written", "encode"),
    WRITTEN_OUT,
    ids=[f"{'key' if s == KEY else 'odd'}-{e.__name__.strip('_')}" for s, written, e in WRITTEN_OUT],
)
def test_every_form_written_out_by_hand_is_masked(secret: str, written: str, encode: Callable[[str], str]) -> None:
    assert encode(secret) == written  # the hand-written form is what the standard library makes
    redact = Redactor([KEY, ODD])
    assert redact(f"server said <{written}> twice <{written}>") == "server said <***> twice <***>"
    assert redact.excerpt(f"{'y' * 196}{written}", 200) == "y" * 196 + "***"


def test_a_message_holding_every_form_at_once_keeps_none_of_them() -> None:
    message = " | ".join(written for _, written, _ in WRITTEN_OUT)
    clean = Redactor([KEY, ODD])(message)
    assert clean == " | ".join(["***"] * len(WRITTEN_OUT))
    assert not any(written in clean for _, written, _ in WRITTEN_OUT)


def test_a_secret_across_the_excerpts_cut_keeps_no_prefix() -> None:
    redact = Redactor([KEY, None, ""])
    assert redact.excerpt("y" * 198 + KEY, 200) == "y" * 198 + "**"  # redacted whole, then cut
    assert redact.excerpt("a\r\nb " + KEY) == "a  b ***"
    assert not Redactor([None, ""]) and Redactor(["k"])("kick") == "***ic***"


PROXY = "http://alice:pw-Secret%2F77@127.0.0.1:3128"
"""A proxy URL with credentials, the password percent-encoded (``%2F``: ``/``)."""
PROXY_CREDENTIALS = "alice:pw-Secret/77"
"""What httpx decodes from it and sends as ``Proxy-Authorization: Basic`` base64(user:password)."""
PROXY_BASIC = "YWxpY2U6cHctU2VjcmV0Lzc3"


def test_a_proxy_urls_credentials_are_masked_as_basic_auth_carries_them() -> None:
    assert base64.b64encode(PROXY_CREDENTIALS.encode()).decode() == PROXY_BASIC
    redact = Redactor([PROXY])
    echoed = f"407 for {PROXY}: Proxy-Authorization: Basic {PROXY_BASIC} ({PROXY_CREDENTIALS})"
    assert redact(echoed) == "407 for ***: Proxy-Authorization: Basic *** (***)"
    user_only = Redactor(["http://tok-0123456789@127.0.0.1:3128"])  # a token as the user name: sent as "token:"
    assert user_only("Basic dG9rLTAxMjM0NTY3ODk6 tok-0123456789:") == "Basic *** ***"


def test_a_value_that_is_no_url_is_still_masked_whole() -> None:
    assert Redactor(["http://[not-a-host-0123"])("x http://[not-a-host-0123 y") == "x *** y"  # urlsplit refuses it
    assert Redactor(["http://127.0.0.1:3128"])("via http://127.0.0.1:3128 to 127.0.0.1") == "via *** to 127.0.0.1"


# -- secrets that nest, share a prefix or overlap in a message ---------------------------------------------------------

NESTED_KEY = "sk-Nested-0123456789"
NESTED_HEADER = f"Bearer {NESTED_KEY}; team=blue-42"
"""A header value holding the key, then more: masking only the key would leave ``; team=blue-42``."""


@pytest.mark.parametrize("order", [1, -1], ids=["key-first", "header-first"])
def test_a_key_inside_a_longer_header_value_leaves_no_part_of_either(order: int) -> None:
    redact = Redactor([NESTED_KEY, NESTED_HEADER][::order])
    header_quoted = "Bearer%20sk-Nested-0123456789%3B%20team%3Dblue-42"
    header_plus = "Bearer+sk-Nested-0123456789%3B+team%3Dblue-42"
    message = f"sent [{NESTED_HEADER}] q={header_quoted} f={header_plus} k={NESTED_KEY}."
    clean = redact(message)
    assert clean == "sent [***] q=*** f=*** k=***."
    for left in (NESTED_KEY, "team=blue-42", "team%3Dblue-42", "blue-42", "Bearer"):
        assert left not in clean


@pytest.mark.parametrize("order", [1, -1], ids=["short-first", "long-first"])
def test_a_secret_that_is_a_prefix_of_another_leaves_no_tail(order: int) -> None:
    short, long = "sk-Prefix-0123456", "sk-Prefix-0123456-and-its-tail-77"
    redact = Redactor([short, long][::order])
    assert redact(f"<{long}> <{short}> <{short}-x>") == "<***> <***> <***-x>"


@pytest.mark.parametrize(
    ("left", "right", "message"),
    [
        ("first-secret-AAAAAAAAAAAAX", "X-second", "first-secret-AAAAAAAAAAAAX-second"),  # the longer first
        ("first-X", "X-second-secret-BBBBBBBBB", "first-X-second-secret-BBBBBBBBB"),  # the longer second
        ("aaa-secret-SHARED-part", "SHARED-part-secret-zz", "aaa-secret-SHARED-part-secret-zz"),  # equal lengths
    ],
    ids=["longer-first", "longer-second", "equal-lengths"],
)
def test_overlapping_secrets_leave_no_part_of_either(left: str, right: str, message: str) -> None:
    assert message.startswith(left) and message.endswith(right) and len(message) < len(left) + len(right)
    for order in (1, -1):
        clean = Redactor([left, right][::order])(f"<{message}>")
        assert clean == "<***>", (order, clean)


def test_a_secret_overlapping_its_own_occurrence_leaves_no_part() -> None:
    periodic = "k9-k9-k9-k9"  # occurs at 0 and at 3 in the message below
    assert Redactor([periodic])("<k9-k9-k9-k9-k9>") == "<***>"
    assert Redactor([periodic])("k9-k9-k9-k9 k9-k9-k9-k9") == "*** ***"


# -- header values: secrets from 8 characters, counted without the surrounding whitespace ---------------------------


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ("1234567", False),
        ("12345678", True),
        ("123456789", True),
        (" 1234567 ", False),  # 9 characters, 7 once stripped
        ("\t1234567\n", False),
        ("1234567 ", False),  # 8 characters, 7 once stripped
        (" 12345678", True),
        ("12345678\r\n", True),
    ],
)
def test_a_header_value_is_a_secret_from_eight_characters_once_stripped(value: str, secret: bool) -> None:
    assert MIN_HEADER_SECRET == 8  # the documented minimum (docs/security.md)
    headers = {"X-Flag": "1", "X-Value": value}
    assert header_secrets(headers) == ([value] if secret else [])
    pools = LoopPools(
        "http://127.0.0.1:9/v1", max_concurrency=1, timeout_s=1.0, connect_timeout_s=1.0, headers=headers
    )  # what the engines and the judge build: its redact scrubs their messages
    core = value.strip()
    message = f"flag 1, value [{core}], padded [{value}]"
    expected = "flag 1, value [***], padded [***]" if secret else message
    assert pools.redact(message) == expected


@pytest.mark.parametrize(
    "url",
    [
        "HTTPS://alice:pw-Secret-77@127.0.0.1:9/v1",  # the scheme in capitals
        " https://alice:pw-Secret-77@127.0.0.1:9/v1",  # a leading space
        "\thttps://alice:pw-Secret-77@127.0.0.1:9/v1",  # a leading tab
        "https:/alice:pw-Secret-77@127.0.0.1:9/v1",  # one slash
        "https:///alice:pw-Secret-77@127.0.0.1:9/v1",  # three
        "https:\\\\alice:pw-Secret-77@127.0.0.1:9/v1",  # backslashes
        "htps//alice:pw-Secret-77@127.0.0.1:9/v1",  # a mistyped scheme with no colon
        "alice:pw-Secret-77@127.0.0.1:9/v1",  # no scheme
        "http://tok-Secret-77@127.0.0.1:9/v1",  # a token as the user name, no password
    ],
)
def test_credentials_in_a_url_are_refused_whatever_the_schemes_spelling(url: str) -> None:
    """The check reads the URL as loosely as any client might, so that no spelling shows a password in an error."""
    with pytest.raises(CredentialError, match=r"\*\*\*@127\.0\.0\.1:9") as error:
        refuse_url_credentials(url)
    assert "Secret-77" not in str(error.value) and "alice" not in str(error.value).split("***")[-1]


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/v1", "https://host/v1/models/a@b", "https://host/v1?x=a@b", "http://[::1]:80/v1"]
)
def test_a_url_with_an_at_sign_only_after_its_host_is_kept(url: str) -> None:
    assert refuse_url_credentials(url) == url

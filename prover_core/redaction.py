"""Secrets of the library's HTTP clients (the engines and the LLM judge): reading a key, keeping URLs free of
credentials, and scrubbing every form of a secret from the text of a message.

* :func:`read_key`: the key in an environment variable, stripped of surrounding whitespace (a secret file
  mounted with its final newline, a CRLF ``.env``); a key with a character that cannot travel in an HTTP
  header (non-printable or non-ASCII) is refused with a :class:`~prover_core.errors.CredentialError` that
  names the variable, never the value.
* :func:`refuse_url_credentials`: a URL with ``user:password@`` is refused (the error shows it with the
  credentials replaced by ``***``); keys travel in ``Authorization`` headers, never in URLs, which reach
  reprs, logs and reports.
* :class:`Redactor`: replaces each secret in a text by ``***`` in every form it may take in a message: raw,
  ``repr``-escaped, JSON-escaped, percent-encoded (``/`` escaped or kept) and form-encoded (``+`` for a space);
  for a URL with ``user:password@`` (a proxy's), also those credentials as they travel in its
  ``Proxy-Authorization: Basic`` header. Every character inside an occurrence is masked, so occurrences that
  overlap or nest (a key inside a longer header value, two secrets sharing characters) leave no part of either.
  A message is redacted whole, before any excerpt is cut (:meth:`Redactor.excerpt`), so a secret across the cut
  cannot keep a prefix.
"""

from __future__ import annotations

import base64
import heapq
import json
import logging
import os
import re
import weakref
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import quote, quote_plus, unquote, urlsplit

from pydantic import SecretStr

from prover_core.errors import CredentialError

MASK = "***"
"""What a secret is replaced by."""
MIN_HEADER_SECRET = 8
"""Header values shorter than this are not treated as secrets (a flag such as ``"1"`` would mask every digit 1)."""


def variable_name(variable: str) -> str:
    """``variable`` as a message may show it: itself when it reads as a conventional environment variable name
    (``[A-Z_][A-Z0-9_]*``, at most 64 characters), else masked with its length. A key passed where its variable's
    name belongs (``api_key_env="sk-..."``) must not reach a message or a log."""
    if re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", variable):
        return repr(variable)
    return f"{MASK} (a value of {len(variable)} characters, not shown: is it the key itself rather than its name?)"


def read_key(variable: str, role: str) -> SecretStr:
    """The key held by the environment variable ``variable`` (``role`` says whose key, for messages).

    Surrounding whitespace is stripped; a variable that is unset or blank raises :class:`ValueError`, a key with
    a non-printable or non-ASCII character :class:`~prover_core.errors.CredentialError`; neither shows the value,
    and the variable's name is shown only when it reads as one (:func:`variable_name`).
    """
    value = (os.environ.get(variable) or "").strip()
    if not value:
        raise ValueError(
            f"the environment variable {variable_name(variable)} ({role}) is not set; api_key_env takes the name of "
            "the variable that holds the key, never the key"
        )
    if not (value.isascii() and value.isprintable()):
        raise CredentialError(
            f"the environment variable {variable_name(variable)} ({role}) holds a non-printable or non-ASCII "
            "character inside the key, which cannot be sent in an HTTP header (the value is not shown)"
        )
    return SecretStr(value)


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_AUTHORITY_END = re.compile(r"[/?#\\]")
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
"""What URL parsers strip from a URL's start (the WHATWG URL standard: C0 controls and space)."""


def _authority_starts(url: str) -> set[int]:
    """Where an authority (``user:password@host``) may begin in ``url``, read as loosely as a client might: after
    the scheme's colon and any slashes however many (``https:/``, ``HTTPS:///``), after the first ``//`` (a
    scheme mistyped without its colon), and at the start."""
    starts = set()
    scheme = _SCHEME.match(url)
    if scheme is not None:
        start = scheme.end()
        while url[start : start + 1] in ("/", "\\"):
            start += 1
        starts.add(start)
    if "//" in url:
        starts.add(url.index("//") + 2)
    return starts | {0}  # and the whole text: "user:password@host" with no scheme at all


def refuse_url_credentials(url: str, what: str = "base_url") -> str:
    """``url`` unchanged if it carries no ``user:password@`` (nor ``token@``); else
    :class:`~prover_core.errors.CredentialError`, showing the URL with its credentials masked.

    Checked before any message can show the URL, and whatever the scheme's spelling (``HTTPS://``, one slash, a typo,
    leading whitespace): an ``@`` anywhere in what may be the authority (:func:`_authority_starts`, up to the first
    ``/``, ``?``, ``#`` or ``\\``) is refused, so a URL that no parser reads as carrying credentials still cannot
    carry them into an error."""
    text = url.lstrip(_C0_AND_SPACE)
    for start in sorted(_authority_starts(text)):
        end = _AUTHORITY_END.search(text, start)
        authority = text[start : end.start() if end else len(text)]
        if "@" in authority:
            host = authority.rpartition("@")[2]
            shown = f"{text[:start]}{MASK}@{host}{text[start + len(authority) :]}"
            raise CredentialError(
                f"{what} {shown} carries credentials: give the URL without them and the key through api_key_env "
                "(sent as a bearer token), or a header through headers/extra_headers"
            )
    return url


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """The values of ``headers`` treated as secrets: those of at least :data:`MIN_HEADER_SECRET` characters."""
    return [value for value in headers.values() if len(value.strip()) >= MIN_HEADER_SECRET]


def forms(secret: str) -> set[str]:
    """The forms ``secret`` may take in a message: raw, ``repr``-escaped, JSON-escaped, percent-encoded (``/``
    escaped or kept) and form-encoded (``+`` for a space)."""
    escaped = (repr(secret)[1:-1], json.dumps(secret)[1:-1])
    encoded = (quote(secret, safe=""), quote(secret), quote_plus(secret))
    return {secret, *escaped, *encoded} - {""}


def url_credentials(secret: str) -> list[str]:
    """For a URL with ``user:password@`` (a proxy's), the credentials as its ``Proxy-Authorization: Basic`` header
    carries them: ``user:password`` percent-decoded, and its base64; else nothing."""
    try:
        parts = urlsplit(secret)
        user, password = parts.username, parts.password
    except ValueError:  # not a URL (an unbalanced "[", say)
        return []
    if not user and not password:
        return []
    credentials = f"{unquote(user or '')}:{unquote(password or '')}"
    return [credentials, base64.b64encode(credentials.encode()).decode()]


def _occurrences(text: str, form: str) -> Iterator[tuple[int, int]]:
    """The spans of ``form`` in ``text``, in order, overlapping ones included (``"abab"`` twice in ``"ababab"``)."""
    start = text.find(form)
    while start >= 0:
        yield start, start + len(form)
        start = text.find(form, start + 1)


class Redactor:
    """Masks every form (:func:`forms`) of each secret, and of a proxy URL's credentials (:func:`url_credentials`),
    by ``***``."""

    def __init__(self, secrets: Iterable[str | SecretStr | None] = ()) -> None:
        found: set[str] = set()
        for secret in secrets:
            text = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
            if text:
                for each in (text, text.strip(), *url_credentials(text.strip())):
                    found |= forms(each)
        self._forms = sorted(found)

    def __bool__(self) -> bool:
        return bool(self._forms)

    def __call__(self, text: str) -> str:
        """``text`` with every character inside an occurrence of a form masked: each stretch of overlapping
        occurrences (nested, or two secrets sharing characters, or one secret overlapping itself) becomes one
        ``***``, so no part of any of them is left, whatever order the forms are looked for in."""
        spans = heapq.merge(*(_occurrences(text, form) for form in self._forms))  # by start, lazily
        stretch = next(spans, None)
        if stretch is None:
            return text
        pieces: list[str] = []
        kept = 0  # text[:kept] is in pieces
        first, last = stretch
        for start, end in spans:
            if start < last:  # overlaps the stretch: extend it
                last = max(last, end)
            else:
                pieces += (text[kept:first], MASK)
                kept, first, last = last, start, end
        pieces += (text[kept:first], MASK, text[last:])
        return "".join(pieces)

    def excerpt(self, text: str, limit: int = 200) -> str:
        """The first ``limit`` characters of ``text`` on one line, redacted before it is cut."""
        return self(text).replace("\r", " ").replace("\n", " ")[:limit]


_LIVE: weakref.WeakSet[Redactor] = weakref.WeakSet()
THIRD_PARTY_LOGGERS = (
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "hpack",
)
"""The loggers of the HTTP libraries the clients drive (httpx 0.28, httpcore 1.0: the names they log through; a
logger's filters see only its own records, not its children's): at DEBUG they log headers verbatim, so a server
echoing the key in a header would put it there; :class:`SecretFilter` scrubs them while a client holds secrets."""


def register(redactor: Redactor) -> Redactor:
    """Add ``redactor`` to the live ones that :func:`scrub` applies (while it lives: a client's) and make sure the
    third-party loggers carry a :class:`SecretFilter`."""
    if redactor:
        _LIVE.add(redactor)
        roots = {name.split(".")[0] for name in THIRD_PARTY_LOGGERS}
        names = set(THIRD_PARTY_LOGGERS) | {  # and any other child already made
            name for name in logging.Logger.manager.loggerDict if name.split(".")[0] in roots
        }
        for name in sorted(names):
            logger = logging.getLogger(name)
            if not any(isinstance(f, SecretFilter) for f in logger.filters):
                logger.addFilter(SecretFilter())
    return redactor


def scrub(text: str) -> str:
    """``text`` with the secrets of every live client's :class:`Redactor` replaced by ``***``."""
    for redactor in list(_LIVE):
        text = redactor(text)
    return text


REPORTED_CHARS = 2_000
"""The most characters of server-derived text (a judge's decline reason or rationale, an error's message) that a
report, its JSON or a log line keeps."""


def reported(text: str) -> str:
    """Server-derived ``text`` as a report keeps it: every live secret scrubbed (:func:`scrub`), then at most
    :data:`REPORTED_CHARS` characters, a cut marked with the full length."""
    clean = scrub(text)
    return clean if len(clean) <= REPORTED_CHARS else f"{clean[:REPORTED_CHARS]}… ({len(clean)} characters)"


class SecretFilter(logging.Filter):
    """Rewrites a record's message with :func:`scrub` (the arguments folded in first), so no live secret is logged
    by a library the clients drive."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _LIVE:
            message = record.getMessage()
            clean = scrub(message)
            if clean != message:
                record.msg, record.args = clean, None
        return True


__all__ = [
    "MASK",
    "MIN_HEADER_SECRET",
    "REPORTED_CHARS",
    "Redactor",
    "SecretFilter",
    "THIRD_PARTY_LOGGERS",
    "forms",
    "header_secrets",
    "read_key",
    "refuse_url_credentials",
    "register",
    "reported",
    "scrub",
    "url_credentials",
    "variable_name",
]

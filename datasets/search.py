"""The item browser's text search on PostgreSQL: a word index instead of a trigram index.

A trigram GIN index answers `LIKE '%text%'` for any substring, but keeping it costs the server
~0.5 ms of CPU per imported dialog (a few hundred trigrams each), which made it most of a large
import's time. The importer therefore also writes each item's distinct words (`search_words`, a
tsvector literal built here, so the server does no text parsing) and a GIN index covers them: a
tenth of the keys. A search for "zebra cross" asks the index for items with the word "zebra" and a
word starting with "cross", then checks that the text of those contains "zebra cross".
So a search finds text that contains what was typed, starting at the beginning of a word; it no
longer finds a fragment from inside a word ("ebra"). SQLite keeps scanning search_text.
"""

from __future__ import annotations

import re
from itertools import filterfalse

WORD = re.compile(r"\w+")
# Words are indexed and looked up by at most this many characters: a longer word is found by its
# first WORD_CHARS characters (the LIKE check then compares the whole text), and one lexeme stays far
# under PostgreSQL's 2 KB limit.
WORD_CHARS = 32
# A tsvector holds at most 1 MB of lexemes. An item with more distinct words than fit is not
# word-indexed; it carries the lexeme UNINDEXED (a space: never a word) and every search checks it.
MAX_LEXEME_BYTES = 900_000
UNINDEXED = "' '"


# The ASCII bytes that end a word, mapped to spaces: bytes.translate + split find the words of most text at
# C speed; only pieces holding non-ASCII bytes are looked at again, one by one.
_BREAKS = bytes(code for code in range(128) if not WORD.fullmatch(chr(code)))
_TO_SPACES = bytes.maketrans(_BREAKS, b" " * len(_BREAKS))


def words_of(text: str) -> set[str]:
    """The distinct words of `text` as WORD finds them, each cut to WORD_CHARS characters."""
    ascii_words, other_words = _words(text)
    return {word.decode() for word in ascii_words} | other_words


def search_words(text: str) -> str:
    """The tsvector literal of the distinct words of `text` (already lower-cased), for COPY."""
    ascii_words, other_words = _words(text)
    if not ascii_words and not other_words:
        return ""
    literal = "'" + b"' '".join(ascii_words).decode()  # \w never holds a quote or a backslash
    if other_words:
        literal = literal + ("' '" if ascii_words else "") + "' '".join(other_words)
    literal += "'"
    if len(literal) > MAX_LEXEME_BYTES // 4 and len(literal.encode()) > MAX_LEXEME_BYTES:
        return UNINDEXED
    return literal


def _words(text: str) -> tuple[set[bytes], set[str]]:
    """The distinct words of `text` cut to WORD_CHARS characters: those of ASCII characters as bytes
    (found, and turned into a literal, at C speed), and the others (whose words may also be ASCII)."""
    spaced = text.encode(errors="surrogatepass").translate(_TO_SPACES)
    ascii_words = set(spaced.split())
    other_words: set[str] = set()
    if not spaced.isascii():
        odd = set(filterfalse(bytes.isascii, ascii_words))
        ascii_words -= odd
        for piece in odd:
            word = piece.decode(errors="surrogatepass")
            if word.isalnum():
                other_words.add(word[:WORD_CHARS])
            else:  # a non-ASCII character that is not a letter or digit (’, —, …) splits it further
                other_words.update(part[:WORD_CHARS] for part in WORD.findall(word))
    if ascii_words and max(map(len, ascii_words)) > WORD_CHARS:
        ascii_words = {word[:WORD_CHARS] for word in ascii_words}
    return ascii_words, other_words


def is_one_word(query: str) -> bool:
    """A query that is a single whole word (as WORD finds them) of at most WORD_CHARS characters: an item
    has a word starting with it exactly when its text contains it from the start of a word, so the index
    answers alone and the text need not be read (and decompressed) for every match of a common word."""
    return len(query) <= WORD_CHARS and WORD.fullmatch(query) is not None


def words_query(query: str) -> str | None:
    """The tsquery literal that finds every item whose text may contain `query` from the start of a
    word: each word of the query is a word of the item, the last one a prefix of a word (unless the query
    goes on after it: "zebra cross" is 'zebra' & 'cross':*). A query word followed by a character that ends
    a word is a whole word wherever the query matches from a word's start, and GIN finds a whole word
    several times faster than a prefix (a prefix's items are gathered into a bitmap first). None when the
    query has no word."""
    lowered = query.lower()
    found = list(WORD.finditer(lowered))
    if not found:
        return None
    whole = {match.group()[:WORD_CHARS] for match in found[:-1]}
    last = found[-1].group()[:WORD_CHARS]
    if found[-1].end() < len(lowered) or last in whole:
        whole.add(last)
        last = ""
    terms = [f"'{word}'" for word in sorted(whole)] + ([f"'{last}':*"] if last else [])
    return f"({' & '.join(terms)}) | {UNINDEXED}"

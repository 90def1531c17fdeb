"""LetterPattern: `re` on ASCII text answers exactly as `regex` with \\p{L}\\p{N} would."""

from __future__ import annotations

import subprocess
import sys

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.broker import protocol as pb
from gazette.broker.protocol import letters, selector, tokens

# The characters selectors and tokens are made of, and some they must refuse.
ASCII_TEXT = st.text(alphabet="abzAZ09-_+/.=%:!(), \n\tinotprefx\\]^#", max_size=40)

PATTERNS = [
    *tokens._TOKEN_RE.values(),
    selector._RE_EQUAL,
    selector._RE_NOT_EQUAL,
    selector._RE_SET_IN,
    selector._RE_SET_NOT_IN,
    selector._RE_EXISTS,
    selector._RE_NOT_EXISTS,
    selector._RE_SET_VALUE,
]


def _unicode(p: letters.LetterPattern) -> regex.Pattern[str]:
    return regex.compile(p._template.replace("<LN>", r"\p{L}\p{N}"))


@settings(max_examples=2000, deadline=None)
@given(text=ASCII_TEXT, pos=st.integers(min_value=0, max_value=5))
def test_ascii_text_matches_as_with_unicode_classes(text: str, pos: int) -> None:
    for p in PATTERNS:
        want = _unicode(p).match(text, pos)
        got = p.for_text(text).match(text, pos)
        assert (got and (got.span(), got.groups())) == (want and (want.span(), want.groups()))
        want = _unicode(p).fullmatch(text)
        got = p.for_text(text).fullmatch(text)
        assert bool(got) == bool(want)


def test_text_beyond_ascii_uses_unicode_classes() -> None:
    assert pb.format_selector(pb.parse_selector("名前=値, zone in (ä, b2)")) == (
        "zone in (b2,ä),名前=値"
    )
    pb.validate_token("région-1", 1, 20)
    with pytest.raises(pb.ValidationError, match="not a valid token"):
        pb.validate_token("a\u00a0b", 1, 20)  # A no-break space is no letter.
    with pytest.raises(ValueError, match="no <LN> class"):
        letters.LetterPattern("[a-z]")


def test_importing_the_protocol_and_ascii_work_skip_regex() -> None:
    # A one-shot gazctl pays for neither `regex` nor the postfix template evaluator.
    code = (
        "import sys; from gazette.broker import protocol as pb; "
        "pb.parse_selector('topic=logs, region in (apac, us)'); "
        "pb.validate(pb.JournalSpec(name='a/b/c', replication=1, "
        "fragment=pb.JournalSpec.Fragment(length=1024, compression_codec=pb.NONE, "
        "refresh_interval=pb.duration_from_seconds(60)))); "
        "print('regex' in sys.modules, 'gazette.broker.protocol.postfix_template' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stderr

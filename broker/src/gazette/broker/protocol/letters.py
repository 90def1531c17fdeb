"""Patterns over Unicode letters and numbers, as Go's ``\\p{L}\\p{N}``, cheap for ASCII text.

Go's RE2 classes ``\\p{L}`` and ``\\p{N}`` need the third-party ``regex``
module, whose import costs a one-shot ``gazctl`` about a sixth of its start.
For ASCII text (nearly every token, name and selector) the classes are exactly
``A-Za-z0-9``, which the standard ``re`` matches the same way (both match
leftmost-first, as RE2 does); ``regex`` is imported the first time a text is not
ASCII. Write ``<LN>`` where the class's letters-and-numbers part goes::

    name = LetterPattern(r"[<LN>\\-_+/.]{2,}")
    name.for_text("tier").fullmatch("tier")
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["LetterPattern"]

_PLACEHOLDER = "<LN>"


class LetterPattern:
    """A pattern compiled with ``re`` for ASCII text and ``regex`` (lazily) for the rest."""

    def __init__(self, template: str) -> None:
        if _PLACEHOLDER not in template:
            raise ValueError(f"pattern {template!r} has no {_PLACEHOLDER} class")
        self._template = template
        self._ascii = re.compile(template.replace(_PLACEHOLDER, "A-Za-z0-9"))
        self._unicode: Any = None

    def for_text(self, text: str) -> Any:
        """The compiled pattern to match ``text`` with (``re`` or ``regex``)."""
        if text.isascii():
            return self._ascii
        if self._unicode is None:
            import regex  # Only for text beyond ASCII: see the module docstring.

            self._unicode = regex.compile(self._template.replace(_PLACEHOLDER, r"\p{L}\p{N}"))
        return self._unicode

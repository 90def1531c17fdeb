"""CSV (``text/csv``): one record per frame, with Go ``encoding/csv`` rules.

Gazette `message/csv_framing.go` uses Go's ``csv.Writer`` and ``csv.Reader``
with their defaults, and so do these, rule for rule:

* writing: comma separated, ``\\n`` line ends; a field is quoted when it
  holds ``,``, ``"``, ``\\r`` or ``\\n``, begins with a Unicode space, or is
  ``\\.``; quotes inside are doubled; empty fields are never quoted;
* reading: quoted fields may span lines, ``\\r\\n`` reads as ``\\n``, empty
  lines are skipped, quotes are strict (a bare ``"`` in an unquoted field,
  or text after a closing quote, is an error), and the first record fixes
  the number of fields of every later one of the same read
  (``record on line 2: wrong number of fields``). A last record without a
  newline is accepted at the end of the content, as Go accepts it.

Errors carry Go's wording and 1-based line and byte columns. A bad record
is consumed through the end of the line where the error was found.
"""

from __future__ import annotations

from typing import Any

from gazette.broker import protocol as pb
from gazette.message import errors, framing

__all__ = ["CSVFraming", "encode_csv_record"]

_ERR_BARE_QUOTE = 'bare " in non-quoted-field'
_ERR_QUOTE = 'extraneous or missing " in quoted-field'
_ERR_FIELD_COUNT = "wrong number of fields"

# Go's unicode.IsSpace: the White_Space property.
_SPACES = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _needs_quotes(field: str) -> bool:
    if not field:
        return False
    if field == "\\.":
        return True
    if "," in field or '"' in field or "\n" in field or "\r" in field:
        return True
    return field[0] in _SPACES


def encode_csv_record(fields: list[str]) -> bytes:
    """One record as Go's ``csv.Writer`` writes it, with its ``\\n``."""
    out = []
    for f in fields:
        if _needs_quotes(f):
            out.append('"' + f.replace('"', '""') + '"')
        else:
            out.append(f)
    return (",".join(out) + "\n").encode("utf-8", "surrogateescape")


class CSVFraming:
    """The ``text/csv`` framing of :class:`~gazette.message.framing.CSVFrameable` messages."""

    content_type = pb.CONTENT_TYPE_CSV

    def marshal(self, msg: Any) -> bytes:
        marshal_csv = getattr(msg, "marshal_csv", None)
        if marshal_csv is None:
            raise errors.FramingError(f"{type(msg).__name__} is not CSV-frameable (no marshal_csv)")
        return encode_csv_record(marshal_csv())

    def new_decoder(self) -> _CSVDecoder:
        return _CSVDecoder()


def _len_nl(line: bytes) -> int:
    return 1 if line.endswith(b"\n") else 0


class _ParseError(Exception):
    def __init__(self, start_line: int, line: int, column: int, err: str) -> None:
        self.start_line, self.line, self.column, self.err = start_line, line, column, err
        if err == _ERR_FIELD_COUNT:
            text = f"record on line {line}: {err}"
        elif start_line != line:
            text = (
                f"record on line {start_line}; parse error on line {line}, column {column}: {err}"
            )
        else:
            text = f"parse error on line {line}, column {column}: {err}"
        super().__init__(text)


class _NeedMore(Exception):
    pass


class _CSVDecoder:
    """A port of Go's ``csv.Reader.readRecord`` onto a buffer (per field, never per byte)."""

    __slots__ = ("_buf", "_eof", "_final", "_line_no", "_num_line", "_p", "fields_per_record")

    def __init__(self) -> None:
        self.fields_per_record = 0  # Fixed by the first record read.
        self._num_line = 0
        self._buf = b""
        self._p = 0
        self._final = False
        self._line_no = 0
        self._eof = False

    def _read_line(self) -> bytes:
        """The next line (``\\r\\n`` made ``\\n``); b"" with ``_eof`` set at the end of the content."""
        buf, p = self._buf, self._p
        nl = buf.find(b"\n", p)
        if nl < 0:
            if not self._final:
                raise _NeedMore
            if p == len(buf):
                self._eof = True
                return b""
            line = buf[p:]
            self._p = len(buf)
            self._line_no += 1
            return line[:-1] if line.endswith(b"\r") else line
        line = buf[p : nl + 1]
        self._p = nl + 1
        self._line_no += 1
        if line.endswith(b"\r\n"):
            line = line[:-2] + b"\n"
        return line

    def decode(self, buf: bytes, pos: int, final: bool, msg: Any) -> int:
        self._buf, self._p, self._final = buf, pos, final
        self._line_no, self._eof = self._num_line, False
        try:
            fields = self._read_record()
        except _NeedMore:
            return framing.NEED_MORE
        except _ParseError as e:
            self._num_line = self._line_no
            raise errors.FramingError(str(e), resume=self._p) from None
        finally:
            self._buf = b""
        self._num_line = self._line_no
        if fields is None:
            return framing.CLEAN_END
        end = self._p
        try:
            msg.unmarshal_csv([f.decode("utf-8", "surrogateescape") for f in fields])
        except errors.FramingError as e:
            e.resume = end
            raise
        except Exception as e:
            raise errors.FramingError(f"unmarshal_csv: {e!r}", resume=end) from e
        return end

    def _read_record(self) -> list[bytes] | None:
        # Skip empty lines; None at a clean end.
        while True:
            line = self._read_line()
            if self._eof:
                return None
            if len(line) != _len_nl(line):
                break
        rec_line = self._line_no
        fields: list[bytes] = []
        col = 1
        error: _ParseError | None = None
        while error is None:
            if not line.startswith(b'"'):
                # An unquoted field runs to the next comma, or the end of the line.
                i = line.find(b",")
                field = line[:i] if i >= 0 else line[: len(line) - _len_nl(line)]
                j = field.find(b'"')
                if j >= 0:
                    error = _ParseError(rec_line, self._line_no, col + j, _ERR_BARE_QUOTE)
                    break
                fields.append(field)
                if i < 0:
                    break
                line = line[i + 1 :]
                col += i + 1
                continue
            # A quoted field: to the closing quote, maybe several lines on.
            parts: list[bytes] = []
            line = line[1:]
            col += 1
            pos_line = self._line_no
            while True:
                i = line.find(b'"')
                if i >= 0:
                    parts.append(line[:i])
                    line = line[i + 1 :]
                    col += i + 1
                    nxt = line[:1]
                    if nxt == b'"':  # An escaped quote.
                        parts.append(b'"')
                        line = line[1:]
                        col += 1
                        continue
                    if nxt == b",":  # The end of the field.
                        line = line[1:]
                        col += 1
                        fields.append(b"".join(parts))
                        break
                    if _len_nl(line) == len(line):  # The end of the record.
                        fields.append(b"".join(parts))
                        return self._counted(fields, rec_line, None)
                    error = _ParseError(rec_line, self._line_no, col - 1, _ERR_QUOTE)
                    break
                if line:
                    parts.append(line)
                    col += len(line)
                    line = self._read_line()
                    if line:
                        pos_line += 1
                        col = 1
                    continue
                # The content ended inside the quotes.
                error = _ParseError(rec_line, pos_line, col, _ERR_QUOTE)
                break
        return self._counted(fields, rec_line, error)

    def _counted(
        self, fields: list[bytes], rec_line: int, error: _ParseError | None
    ) -> list[bytes]:
        if self.fields_per_record > 0:
            if len(fields) != self.fields_per_record and error is None:
                error = _ParseError(rec_line, rec_line, 1, _ERR_FIELD_COUNT)
        elif self.fields_per_record == 0:
            self.fields_per_record = len(fields)
        if error is not None:
            raise error
        return fields

"""Options of the ``gazette`` data source, parsed once into a frozen dataclass, and its errors.

Spark hands a data source its ``.option(...)`` pairs with lower-cased keys;
:meth:`SourceOptions.parse` also ignores ``_`` in keys, so ``file_root``,
``fileRoot`` and ``FILE_ROOT`` are one option. An option that no reader,
stream reader or sink of this package knows is refused with an
:class:`OptionError` naming it (a typo must not silently read everything).

Read options (documented defaults in :class:`SourceOptions`): ``broker``,
``selector`` (or the ``load(path)`` argument), ``labels``, ``schema``,
``format``, ``file_root``, ``tail``, ``sample_bytes``, ``sample_journals``,
``batch_bytes``, ``auth_token``, ``mode`` and ``columnNameOfCorruptRecord`` (malformed
JSON records, as Spark's JSON reader), ``trace_opened`` (a test hook). The stream
reader and the sink accept more: they pass their names as ``extra`` and read
the values with :meth:`SourceOptions.extra_option`.

Errors (all raised at planning time, so they surface from ``load()``,
``schema`` or the first action with their message intact)::

    SparkSourceError
     ├── OptionError            an unknown option or a bad value (names the option)
     │    └── SelectorError     a malformed label selector (quotes it)
     ├── NoJournalsError        the selector matches no journal
     ├── BrokerUnavailableError no broker answers at the address (names it)
     └── ReadError              a fragment or a broker read failed mid-partition
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Mapping

from gazette.broker import protocol as pb

__all__ = [
    "CORRUPT_RECORD_COLUMN",
    "DEFAULT_BROKER",
    "FORMATS",
    "MODES",
    "BrokerUnavailableError",
    "NoJournalsError",
    "OptionError",
    "ReadError",
    "SelectorError",
    "SourceOptions",
    "SparkSourceError",
    "canonical_key",
]

#: The broker address when neither the ``broker`` option nor ``$BROKER_ADDRESS`` is set.
DEFAULT_BROKER = "http://localhost:8080"
#: Values of the ``format`` option: by each journal's ``content-type`` label, or forced.
FORMATS = ("auto", "json", "lines")
#: Values of the ``mode`` option, as Spark's JSON reader takes them: what a malformed
#: JSON record does (kept as a row of nulls with its text in the corrupt-record column,
#: dropped, or failing the read).
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
#: Spark's default name of the column holding a malformed record's text.
CORRUPT_RECORD_COLUMN = "_corrupt_record"


class SparkSourceError(Exception):
    """Base of every error the ``gazette`` data source raises on purpose."""


class OptionError(SparkSourceError, ValueError):
    """An option is unknown, missing or has a bad value; ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(message)


class SelectorError(OptionError):
    """The ``selector`` option is not a valid Gazette label selector."""

    def __init__(self, selector: str, reason: str) -> None:
        self.selector = selector
        super().__init__("selector", f"malformed label selector {selector!r}: {reason}")


class NoJournalsError(SparkSourceError):
    """The selector is valid but matches no journal of the cluster."""

    def __init__(self, selector: str, broker: str) -> None:
        self.selector = selector
        self.broker = broker
        super().__init__(f"label selector {selector!r} matches no journal (broker {broker})")


class BrokerUnavailableError(SparkSourceError):
    """No broker answered at ``broker`` (it is down, or the address is wrong)."""

    def __init__(self, broker: str, what: str, cause: BaseException) -> None:
        self.broker = broker
        super().__init__(f"cannot reach the Gazette broker at {broker} ({what}): {cause}")


class ReadError(SparkSourceError):
    """Reading a journal's content failed (``journal`` and ``offset`` say where)."""

    def __init__(self, journal: str, offset: int, message: str) -> None:
        self.journal = journal
        self.offset = offset
        super().__init__(f"reading journal {journal} at offset {offset}: {message}")


_SAMPLE_BYTES = 1 << 20
_SAMPLE_JOURNALS = 8
_BATCH_BYTES = 32 << 20


def canonical_key(key: str) -> str:
    """The form options are matched in: lower case, without underscores."""
    return key.lower().replace("_", "")


# Canonical key -> the documented (snake_case) name, of every read option.
_READ_OPTIONS = {
    canonical_key(name): name
    for name in (
        "broker",
        "selector",
        "path",
        "labels",
        "schema",
        "format",
        "file_root",
        "tail",
        "sample_bytes",
        "sample_journals",
        "batch_bytes",
        "auth_token",
        "trace_opened",
        "mode",
        "column_name_of_corrupt_record",
    )
}


@dataclasses.dataclass(frozen=True, slots=True)
class SourceOptions:
    """The parsed options of one ``spark.read`` / ``readStream`` / ``write`` of ``gazette``."""

    #: Broker address (``--broker.address``); default ``$BROKER_ADDRESS`` or :data:`DEFAULT_BROKER`.
    broker: str = DEFAULT_BROKER
    #: Label selector of the journals (``topic=logs, region in (us, eu)``); "" when not given.
    selector: str = ""
    #: Labels exposed as string columns, one per name (``labels=region,topic``).
    labels: tuple[str, ...] = ()
    #: DDL of the JSON payload columns (``id BIGINT, user STRING``); "" infers it from a sample.
    schema: str = ""
    #: ``auto`` (JSON lines for ``content-type: application/x-ndjson``, else lines),
    #: ``json`` or ``lines`` for every journal.
    format: str = "auto"
    #: Directory that roots ``file://`` store URLs (the brokers' ``--broker.file-root``
    #: as mounted where executors run); "" reads ``file://`` fragments through the brokers.
    file_root: str = ""
    #: Read the unpersisted tail (last persisted fragment to the write head) from brokers.
    tail: bool = True
    #: Bytes of each sampled journal used to infer a JSON schema.
    sample_bytes: int = _SAMPLE_BYTES
    #: Journals sampled to infer a JSON schema.
    sample_journals: int = _SAMPLE_JOURNALS
    #: Decoded bytes parsed into one Arrow record batch.
    batch_bytes: int = _BATCH_BYTES
    #: Bearer token sent to brokers ("" for none).
    auth_token: str = ""
    #: What a malformed JSON record does (:data:`MODES`): ``PERMISSIVE`` keeps it as a
    #: row whose payload is null, with its text in :attr:`corrupt_column` when the
    #: schema has that column (an inferred schema gets it when the sample had one);
    #: ``DROPMALFORMED`` skips it; ``FAILFAST`` fails the read, naming journal and offset.
    mode: str = "PERMISSIVE"
    #: The string column of malformed records' text (``columnNameOfCorruptRecord``).
    corrupt_column: str = CORRUPT_RECORD_COLUMN
    #: Test hook: a file to which each fragment opened from a store appends one line.
    trace_opened: str = ""
    #: Options of the stream reader or sink, (canonical key, value) pairs.
    extra: tuple[tuple[str, str], ...] = ()
    #: Keys neither read options nor ``extra`` (kept only by a lenient parse, for messages).
    unknown: tuple[str, ...] = ()

    @classmethod
    def parse(
        cls,
        options: Mapping[str, str],
        *,
        extra: Collection[str] = (),
        strict: bool = True,
    ) -> SourceOptions:
        """Parse Spark's option map; ``extra`` names options of a stream reader or sink.

        With ``strict`` an option that is neither a read option nor in ``extra``
        raises :class:`OptionError`; ``schema()`` parses leniently, as it runs
        for readers and stream readers alike.
        """
        extra_keys = {canonical_key(e) for e in extra}
        values: dict[str, str] = {}
        extras: list[tuple[str, str]] = []
        unknown: list[str] = []
        for key, value in options.items():
            canon = canonical_key(key)
            if canon in _READ_OPTIONS:
                values[_READ_OPTIONS[canon]] = value
            elif canon in extra_keys:
                extras.append((canon, value))
            elif strict:
                known = sorted({*_READ_OPTIONS.values(), *extra} - {"path"})
                raise OptionError(
                    key,
                    f"unknown option {key!r} of the gazette data source (known: {', '.join(known)})",
                )
            else:
                unknown.append(key)

        selector = values.get("selector", values.get("path", "")).strip()
        if selector:
            try:
                pb.parse_selector(selector)
            except pb.ValidationError as e:
                raise SelectorError(selector, str(e)) from e

        fmt = values.get("format", "auto").strip().lower()
        if fmt not in FORMATS:
            raise OptionError("format", f"option format must be one of {FORMATS}, not {fmt!r}")
        mode = values.get("mode", "PERMISSIVE").strip().upper()
        if mode not in MODES:
            raise OptionError(
                "mode", f"option mode must be one of {', '.join(MODES)}, not {values['mode']!r}"
            )
        corrupt = values.get("column_name_of_corrupt_record", CORRUPT_RECORD_COLUMN).strip()
        if not corrupt:
            raise OptionError(
                "columnNameOfCorruptRecord", "option columnNameOfCorruptRecord must not be empty"
            )
        labels = tuple(n.strip() for n in values.get("labels", "").split(",") if n.strip())
        for name in labels:
            try:
                pb.validate_label(pb.Label(name=name))
            except pb.ValidationError as e:
                raise OptionError("labels", f"option labels: bad label name {name!r}: {e}") from e

        return cls(
            broker=values.get("broker") or os.environ.get("BROKER_ADDRESS") or DEFAULT_BROKER,
            selector=selector,
            labels=labels,
            schema=values.get("schema", "").strip(),
            format=fmt,
            file_root=values.get("file_root", ""),
            tail=_bool("tail", values.get("tail", "true")),
            sample_bytes=_int("sample_bytes", values.get("sample_bytes"), _SAMPLE_BYTES),
            sample_journals=_int(
                "sample_journals", values.get("sample_journals"), _SAMPLE_JOURNALS
            ),
            batch_bytes=_int("batch_bytes", values.get("batch_bytes"), _BATCH_BYTES),
            auth_token=values.get("auth_token", ""),
            mode=mode,
            corrupt_column=corrupt,
            trace_opened=values.get("trace_opened", ""),
            extra=tuple(extras),
            unknown=tuple(unknown),
        )

    def require_selector(self) -> str:
        """The selector, or an OptionError saying it is required."""
        if not self.selector:
            also = "".join(f"; unknown option {k!r}" for k in self.unknown)
            raise OptionError(
                "selector",
                "option selector is required: .option('selector', 'topic=logs') or "
                f".load('topic=logs'){also}",
            )
        return self.selector

    def extra_option(self, name: str, default: str = "") -> str:
        """The value of stream-reader or sink option ``name`` (``default`` when not given)."""
        canon = canonical_key(name)
        for key, value in self.extra:
            if key == canon:
                return value
        return default


def _bool(name: str, text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise OptionError(name, f"option {name} must be true or false, not {text!r}")


def _int(name: str, text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(name, f"option {name} must be an integer, not {text!r}") from None
    if value <= 0:
        raise OptionError(name, f"option {name} must be positive, not {value}")
    return value
